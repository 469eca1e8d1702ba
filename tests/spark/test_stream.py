"""Streaming reads: per-trigger limits under availableNow, and a restart that resumes from
the checkpoint and reads only the records appended since.

Method: the query writes to a Parquet sink (exactly-once with its checkpoint; the memory
sink cannot restart, P13); each run is `trigger(availableNow=True)` and awaited, so no
sleeps; the runs' progress reports and the Parquet rows are the evidence.
"""

from __future__ import annotations

import json

import pytest

from tests.spark.test_read import expected, fill

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def run_once(spark, node, out: str, checkpoint: str) -> list[dict]:
    query = (spark.readStream.format("topics").option("url", node.endpoint)
             .option("topics", "st-a,st-b").option("maxRecordsPerTrigger", "40")
             .option("seqsPerPartition", "25").load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(150)
        assert query.exception() is None
        return [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()


def parquet_rows(spark, out: str) -> list[tuple]:
    return sorted((r.topic, r.seq, r.tag, r.data) for r in spark.read.parquet(out).collect())


def test_stream_restarts_from_checkpoint_reading_only_new_records(spark, node, tmp_path):
    c = node.client()
    fill(c, "st-a", 70)
    fill(c, "st-b", 30)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    first = run_once(spark, node, out, checkpoint)
    assert sum(p["numInputRows"] for p in first) == 100
    assert len(first) >= 3 and all(p["numInputRows"] <= 40 for p in first)
    ends = first[-1]["sources"][0]["endOffset"]
    assert json.loads(ends) == {"v": 1, "topics": {"st-a": 70, "st-b": 30}}
    fill(c, "st-a", 15, first=71)
    fill(c, "st-b", 5, first=31)
    second = run_once(spark, node, out, checkpoint)
    assert sum(p["numInputRows"] for p in second) == 20
    assert parquet_rows(spark, out) == sorted(expected("st-a", range(1, 86)) +
                                              expected("st-b", range(1, 36)))
    assert run_once(spark, node, out, checkpoint) == []       # nothing new: no batch
