"""Writes that survive injected task failures with zero duplicates and zero losses.

Method: rows pass through a Python UDF that raises at one row while a marker file says
fewer than `failures` injections happened (the workers are separate processes, so the
count lives in a file). Before raising, the UDF notes how many records the topic holds,
which proves the failing attempt had already appended part of its rows. local[2,2] allows
one retry: one injection is survived by the task retry (batch write); two kill the query,
which is then restarted from its checkpoint (streaming write). Small Arrow batches make the
writer flush chunks before the failing row is reached.
"""

from __future__ import annotations

import json
import os

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from tests.support import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

FAIL_AT = 700
PAD = "x" * 4096      # big rows: the UDF cannot run far ahead of the writer (socket buffers)


def held(endpoint: str, topic: str) -> int:
    from topics_actors.client import Client, TopicsError
    with Client(endpoint, retry_deadline_ms=2000) as client:
        try:
            return client.get_topic(topic, touch=False)["count"]
        except TopicsError:
            return 0


def inject(marker: str, endpoint: str, topic: str, failures: int):
    """A UDF: the JSON of its row's number, failing at FAIL_AT `failures` times, each time
    once the writer has appended something (so the failed attempt leaves a partial write)."""
    def payload(n: int) -> str:
        if n == FAIL_AT:
            seen = read_marker(marker)
            if len(seen) < failures:
                if not seen:
                    wait_for(lambda: held(endpoint, topic), 60, "a partial append")
                with open(marker, "a") as handle:
                    handle.write(f"{held(endpoint, topic)}\n")
                raise RuntimeError(f"injected failure {len(seen) + 1} at row {n}")
        return json.dumps({"n": n, "pad": PAD})
    return F.udf(payload, StringType(), useArrow=False)


def read_marker(marker: str) -> list[int]:
    if not os.path.exists(marker):
        return []
    with open(marker) as handle:
        return [int(line) for line in handle.read().split()]


@pytest.fixture
def small_arrow_batches(spark):
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "20")
    yield
    spark.conf.unset(key)


def numbers(client, topic: str) -> list[int]:
    out, cursor = [], 0
    while True:
        page = client.diff(topic, cursor, 1000)
        out += [r["data"]["n"] for r in page["records"]]
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return out


def test_batch_write_survives_a_task_retry(spark, node, tmp_path, small_arrow_batches):
    marker = str(tmp_path / "failures")
    udf = inject(marker, node.endpoint, "w-batch", failures=1)
    df = spark.range(0, 1000, numPartitions=1).select(udf(F.col("id")).alias("data"))
    (df.write.format("topics").option("url", node.endpoint).option("topic", "w-batch")
     .option("batchSize", "50").mode("append").save())
    held_at_failure = read_marker(marker)
    assert len(held_at_failure) == 1 and 0 < held_at_failure[0] < 1000   # a partial append
    got = numbers(node.client(), "w-batch")
    assert sorted(got) == list(range(1000)) and len(got) == len(set(got))


def test_batch_write_rerun_with_the_same_write_id_adds_nothing(spark, node):
    df = spark.range(0, 300, numPartitions=2).select(
        F.to_json(F.struct(F.col("id").alias("n"))).alias("data"),
        F.lit("w-rerun").alias("topic"), F.lit("t").alias("tag"))
    for _ in range(2):
        (df.write.format("topics").option("url", node.endpoint).option("writeId", "job-1")
         .option("batchSize", "40").mode("append").save())
    c = node.client()
    assert sorted(numbers(c, "w-rerun")) == list(range(300))
    with pytest.raises(Exception, match="string column 'data'"):
        spark.range(3).write.format("topics").option("url", node.endpoint) \
            .option("topic", "w-rerun").mode("append").save()


def test_stream_write_survives_a_killed_query(spark, node, tmp_path, small_arrow_batches):
    c = node.client()
    c.append("w-src", [{"data": {"n": n}} for n in range(1000)])
    marker = str(tmp_path / "failures")
    udf = inject(marker, node.endpoint, "w-stream", failures=2)
    checkpoint = str(tmp_path / "checkpoint")

    def start():
        source = (spark.readStream.format("topics").option("url", node.endpoint)
                  .option("topics", "w-src").load())
        numbered = source.select(udf(F.get_json_object("data", "$.n").cast("int"))
                                 .alias("data"))
        return (numbered.writeStream.format("topics").option("url", node.endpoint)
                .option("topic", "w-stream").option("batchSize", "50")
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    query = start()
    with pytest.raises(Exception, match="injected failure 2"):
        query.awaitTermination(150)
    held_at_failure = read_marker(marker)
    assert len(held_at_failure) == 2 and 0 < held_at_failure[0] < 1000
    query = start()
    query.awaitTermination(150)
    assert query.exception() is None
    got = numbers(c, "w-stream")
    assert sorted(got) == list(range(1000)) and len(got) == len(set(got))
