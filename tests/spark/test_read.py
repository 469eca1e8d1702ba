"""Batch reads through Spark: many topics, ranges, pushdown, gaps, segment files.

Goal: a DataFrame over the `topics` format holds exactly the records the options select,
each once, with data as the JSON text appended; a gap inside the planned range fails the
read under failOnDataLoss and is skipped without it; the segment-file reader (dataDir)
returns the sealed history from the hot and the cold dir without the server.
Method: one node per module, each test on its own topics; one session-wide local Spark.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.support import Node, alive, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def load(spark, node, topics: str, **options):
    reader = spark.read.format("topics").option("url", node.endpoint).option("topics", topics)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows(df) -> list[tuple]:
    return sorted((r.topic, r.seq, r.tag, r.data) for r in df.collect())


def fill(client, topic: str, count: int, first: int = 1) -> None:
    client.append(topic, [{"data": {"n": i, "topic": topic}, "tag": f"g{i % 3}"}
                          for i in range(first, first + count)])


def expected(topic: str, seqs) -> list[tuple]:
    return [(topic, s, f"g{s % 3}", json.dumps({"n": s, "topic": topic}, separators=(",", ":")))
            for s in seqs]


def test_multi_topic_batch_read(spark, node):
    c = node.client()
    fill(c, "r-orders", 250)
    fill(c, "r-users", 40)
    df = load(spark, node, "r-users,r-orders", seqsPerPartition="100")
    assert df.rdd.getNumPartitions() == 4
    assert rows(df) == sorted(expected("r-orders", range(1, 251)) +
                              expected("r-users", range(1, 41)))
    assert df.where("ts is null").count() == 0
    assert [f.simpleString() for f in df.schema.fields] == [
        "topic:string", "seq:bigint", "ts:timestamp", "tag:string", "node:string",
        "data:string"]
    fill(c, "r-users", 5, first=41)                  # a new load sees them, pinned ends not
    assert load(spark, node, "r-users").count() == 45


def test_ranged_read_and_pushdown(spark, node):
    c = node.client()
    fill(c, "r-range", 120)
    fill(c, "r-other", 10)
    ranged = load(spark, node, "r-range,r-other", startingOffsets='{"r-range": 50}',
                  endingOffsets='{"r-range": 70, "r-other": 3}')
    assert rows(ranged) == sorted(expected("r-range", range(51, 71)) +
                                  expected("r-other", range(1, 4)))
    pushed = load(spark, node, "r-range,r-other", pushdown="true").where(
        "topic = 'r-range' and seq >= 100 and seq < 110")
    assert rows(pushed) == expected("r-range", range(100, 110))
    assert pushed.rdd.getNumPartitions() == 1        # planned from the filters, not filtered
    plan = pushed._jdf.queryExecution().executedPlan().toString()
    assert ">= 100" not in plan and "r-range" not in plan   # consumed filters left the plan


def test_gap_fails_or_is_skipped(spark, node):
    c = node.client()
    c.put_topic("r-capped", cap_records=10)
    for i in range(1, 41):
        c.append("r-capped", [{"data": {"n": i, "topic": "r-capped"}, "tag": f"g{i % 3}"}])
    from_zero = {"startingOffsets": '{"r-capped": 0}'}
    with pytest.raises(Exception, match="DataLossError"):
        load(spark, node, "r-capped", **from_zero).collect()
    skipped = load(spark, node, "r-capped", failOnDataLoss="false", **from_zero)
    assert rows(skipped) == expected("r-capped", range(31, 41))
    assert rows(load(spark, node, "r-capped")) == expected("r-capped", range(31, 41))


FAST = {"TOPICS_CHECKPOINT_INTERVAL_MS": "300", "TOPICS_SEGMENT_MAX_EVENTS": "64"}


def test_segment_files_hot_and_cold(spark, tmp_path):
    data_dir, cold_dir = str(tmp_path / "data"), str(tmp_path / "cold")
    node = Node(data_dir, shards=2, env=FAST, log_path=str(tmp_path / "node.log")).start()
    try:
        c = node.client()
        fill(c, "s-hist", 300)
        fill(c, "s-more", 30)
        c.delete_records("s-hist", before_seq=11)
        wait_for(lambda: covers(sealed(data_dir), {"s-hist": 300, "s-more": 30}), 30,
                 "a checkpoint sealing every record")
        pids = [child.pid for child in node.children()]
    finally:
        node.stop()
    assert not alive(pids)
    moved = move_oldest_segment(data_dir, cold_dir, "s-hist")
    df = (spark.read.format("topics").option("dataDir", data_dir).option("coldDir", cold_dir)
          .option("topics", "s-hist,s-more").option("seqsPerPartition", "50").load())
    assert df.rdd.getNumPartitions() >= 7 and moved
    assert rows(df) == sorted(expected("s-hist", range(11, 301)) +
                              expected("s-more", range(1, 31)))
    pushed = (spark.read.format("topics").option("dataDir", data_dir)
              .option("coldDir", cold_dir).option("topics", "s-hist")
              .option("startingOffsets", '{"s-hist": 100}').option("endingOffsets",
                                                                   '{"s-hist": 120}').load())
    assert rows(pushed) == expected("s-hist", range(101, 121))


def sealed(data_dir: str) -> dict[str, int]:
    """topic -> sealed record count per the newest snapshot (its floors applied)."""
    from topics_actors.storage.fs import RealFs
    from topics_actors.storage.snapshot import load_newest
    loaded = load_newest(RealFs(), data_dir)
    if loaded is None:
        return {}
    return {e["name"]: sum(s[1] for s in e["segments"]) for e in loaded[1]["topics"]}


def covers(got: dict[str, int], wanted: dict[str, int]) -> bool:
    return all(got.get(topic, 0) >= count for topic, count in wanted.items())


def move_oldest_segment(data_dir: str, cold_dir: str, topic: str) -> list[str]:
    """Relocate a topic's first segment to the cold tier, same relative path."""
    from topics_actors.storage.fs import RealFs
    from topics_actors.storage.snapshot import load_newest
    entry = next(e for e in load_newest(RealFs(), data_dir)[1]["topics"] if e["name"] == topic)
    first = entry["segments"][0][0]
    os.makedirs(os.path.join(cold_dir, entry["dir"]), exist_ok=True)
    moved = []
    for ext in ("data", "idx"):
        name = os.path.join(entry["dir"], f"seg-{first:016d}.{ext}")
        shutil.move(os.path.join(data_dir, name), os.path.join(cold_dir, name))
        moved.append(name)
    return moved
