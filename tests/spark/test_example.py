"""The example pipeline (examples/orders_pipeline.py) end to end against a real node.

Goal: the batch job's per-product totals in the topic and in Parquet equal totals computed
in plain Python from the seeded orders; re-running it adds nothing to the topic (pinned
writeId); the streaming job aggregates the orders appended since its last run only.
"""

from __future__ import annotations

import collections

import pytest

from examples.orders_pipeline import run_batch, run_stream, seed

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def truth(client, topic: str) -> dict[str, tuple[int, int]]:
    totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    cursor = 0
    while True:
        page = client.diff(topic, cursor, 1000)
        for record in page["records"]:
            totals[record["data"]["product"]][0] += 1
            totals[record["data"]["product"]][1] += record["data"]["qty"]
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return {k: tuple(v) for k, v in totals.items()}


def topic_totals(client, topic: str) -> list[dict]:
    return [r["data"] for r in client.diff(topic, 0, 1000)["records"]]


def test_orders_pipeline_batch_and_stream(spark, node, tmp_path):
    url, out = node.endpoint, str(tmp_path)
    c = node.client()
    seed(url, 3000, "ex-orders")
    expected = truth(c, "ex-orders")
    for _ in range(2):
        run_batch(spark, url, out, "ex-orders", "ex-by-product")
    written = topic_totals(c, "ex-by-product")
    assert {t["product"]: (t["orders"], t["units"]) for t in written} == expected
    assert len(written) == len(expected)                      # the re-run added nothing
    parquet = spark.read.parquet(f"{out}/batch").collect()
    assert {r.product: (r.orders, r.units) for r in parquet} == expected

    run_stream(spark, url, out, "ex-orders", "ex-stream")
    first = topic_totals(c, "ex-stream")
    assert sum(t["orders"] for t in first) == 3000
    seed(url, 500, "ex-orders")
    run_stream(spark, url, out, "ex-orders", "ex-stream")
    increments = topic_totals(c, "ex-stream")[len(first):]
    assert sum(t["orders"] for t in increments) == 500
    assert all(set(t) == {"product", "orders", "units", "revenue"} for t in increments)
