"""Deletes and evictions survive repeated kill -9 of the whole node, with checkpoints in
between (issue 4, item 6): a cursor below the evict floor still tombstones after restart, a
purely deleted gap still reads silently, and nothing deleted or evicted comes back."""

from __future__ import annotations

import pytest

from tools.testing.node_harness import wait_for

FAST = {"TOPICS_CHECKPOINT_INTERVAL_MS": "300", "TOPICS_SEGMENT_MAX_EVENTS": "8",
        "TOPICS_RECLAIM_INTERVAL_MS": "200"}


def seqs(reply: dict) -> list[int]:
    return [r["$seq"] for r in reply["records"]]


def wait_checkpoint(c) -> None:
    """Until every shard has taken in a snapshot newer than the one it has now."""
    before = [s["snapshot_id"] for s in c.shard_statuses()]
    wait_for(lambda: all(s["snapshot_id"] > b for s, b in zip(c.shard_statuses(), before)),
             20, "a checkpoint every shard took in")


def check(c) -> None:
    capped = c.diff("capped", 0, limit=1000)
    assert capped["tombstone"]["reason"] == "cap" and capped["tombstone"]["gap_to"] == 30
    assert seqs(capped) == list(range(31, 41))
    gone = c.diff("gone", 0, limit=1000)
    assert gone["tombstone"] is None                       # deletes are silent
    assert seqs(gone) == [s for s in range(11, 41) if s % 3]
    assert c.get_topic("gone")["count"] == len(seqs(gone))


@pytest.mark.timeout(120)
def test_deletes_and_evictions_survive_repeated_kills(make_node, data_dir):
    node = make_node(shards=2, data_dir=data_dir, env=FAST)
    c = node.client()
    c.put_topic("capped", durable=True, cap_records=10)
    c.put_topic("gone", durable=True)
    for i in range(1, 41):
        c.append("capped", [{"data": i}])
        c.append("gone", [{"data": i, "tag": "third" if i % 3 == 0 else f"n{i}"}])
    assert c.delete_records("gone", before_seq=11)["deleted"] == 10
    assert c.delete_records("gone", match="third")["deleted"] == 10
    check(c)
    for _ in range(3):
        wait_checkpoint(c)
        node.kill_group()
        node = make_node(shards=2, data_dir=data_dir, env=FAST)
        c = node.client()
        check(c)
        c.append("gone", [{"data": "x", "tag": "later"}])   # one more checkpoint's worth
        c.delete_records("gone", match="later")
    assert node.stop() == 0
