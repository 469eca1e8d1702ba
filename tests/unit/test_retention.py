"""Cap and TTL retention (spec/api.md 3 and 9, spec/storage.md 3.4): floors, tombstones,
`discard: "reject"`, durability of the floors across restarts and checkpoints."""

from __future__ import annotations

import os

import pytest

from tools.testing.manual_clock import ManualClock
from tools.testing.shard_harness import rec
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Append, Diff, GetTopic, Retain
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_scan import FileScan



def diff(h, topic: str, from_seq: int = 0) -> dict:
    return h.call(Diff(topic, from_seq, limit=1000))


def seqs(reply: dict) -> list[int]:
    return [r[0] for r in reply["records"]]


def frames(h, ftype: int) -> list:
    out = []
    for _, path in h.wal_files():
        scan = FileScan(h.fs, path)
        out += [f for f in scan.frames() if f.type == ftype]
        scan.close()
    return out


def test_records_cap_tombstones_the_evicted_prefix(shard):
    shard.put("c", cap_records=3)
    for i in range(5):
        shard.append("c", rec(b"%d" % i))
    state = shard.get("c")
    assert (state["head_seq"], state["earliest_seq"], state["count"]) == (5, 3, 3)
    reply = diff(shard, "c")
    assert reply["tombstone"] == {"gap_from": 1, "gap_to": 2, "reason": "cap",
                                  "missed_estimate": 2, "earliest_seq": 3, "head_seq": 5}
    assert seqs(reply) == [3, 4, 5]
    assert diff(shard, "c", 3)["tombstone"] is None
    assert not frames(shard, FrameType.EVICT_WATERMARK)   # derived from the head: not logged


def test_ttl_floor_is_logged_before_it_takes_effect_and_survives_a_crash(env):
    clock = ManualClock()
    h = env.single(clock=clock)
    h.put("t", ttl_ms=150, durable=True)
    for i in range(3):
        h.append("t", rec(b"%d" % i))
    clock.now += 200
    h.append("t", rec(b"3"))
    state = h.get("t")
    assert (state["earliest_seq"], state["count"], state["head_seq"]) == (4, 1, 4)
    marks = frames(h, FrameType.EVICT_WATERMARK)
    assert marks and marks[-1].flags & 4                  # fsync-class
    reply = diff(h, "t")
    assert reply["tombstone"]["reason"] == "ttl" and reply["tombstone"]["gap_to"] == 3
    assert seqs(reply) == [4]
    clock.now -= 10_000                                   # the clock goes back: no revival
    h.restart(crash=True)
    reply = diff(h, "t")
    assert reply["tombstone"]["gap_to"] == 3 and seqs(reply) == [4]
    assert h.get("t")["count"] == 1
    h.crash()


def test_byte_cap_evicts_oldest_records(shard):
    shard.put("b", cap_bytes=25)
    for i in range(5):
        shard.append("b", rec(b'"%07d"' % i))             # 9 bytes of data each
    state = shard.get("b")
    assert state["bytes"] <= 25 and state["count"] == 2 and state["earliest_seq"] == 4
    reply = diff(shard, "b")
    assert reply["tombstone"]["reason"] == "cap" and seqs(reply) == [4, 5]
    assert frames(shard, FrameType.EVICT_WATERMARK)


def test_discard_reject_refuses_and_changes_nothing(shard):
    shard.put("r", cap_records=2, discard="reject")
    shard.append("r", rec(b"1"), rec(b"2"))
    with pytest.raises(TopicsError) as full:
        shard.append("r", rec(b"3"))
    assert full.value.code == ErrorCode.TOPIC_FULL
    assert full.value.detail["cap_records"] == 2 and full.value.detail["head_seq"] == 2
    with pytest.raises(TopicsError) as big:
        shard.append("r", rec(b"1"), rec(b"2"), rec(b"3"))
    assert big.value.code == ErrorCode.RECORD_TOO_LARGE
    assert shard.get("r")["head_seq"] == 2 and seqs(diff(shard, "r")) == [1, 2]
    shard.put("rb", cap_bytes=4, discard="reject")
    shard.append("rb", rec(b"12"))
    with pytest.raises(TopicsError) as bytes_full:
        shard.append("rb", rec(b"123"))
    assert bytes_full.value.code == ErrorCode.TOPIC_FULL


def test_floors_and_counts_survive_restarts_and_checkpoints(env):
    clock = ManualClock()
    h = env.single(clock=clock)
    h.put("c", cap_records=10, durable=True)   # disk class pads its head after a crash,
    h.put("t", ttl_ms=1000, durable=True)      # and the records cap is seq-based
    for i in range(40):
        h.batch(Append("c", [rec(b"%d" % i)]), Append("t", [rec(b"%d" % i)]))
        clock.now += 100
    before = {name: h.get(name) for name in ("c", "t")}
    env.checkpoint([h])
    for crash in (True, False, True):
        h.restart(crash=crash)
        for name in ("c", "t"):
            state = h.get(name)
            assert state["earliest_seq"] == before[name]["earliest_seq"]
            assert state["count"] == before[name]["count"] == len(seqs(diff(h, name)))
        assert diff(h, "c")["tombstone"]["gap_to"] == 30
    h.crash()


def test_checkpoints_drop_segments_below_the_floor(env):
    h = env.single()
    cp = env.checkpointer(max_events=10)
    h.put("c", cap_records=15, durable=True)
    for i in range(60):
        h.append("c", rec(b"%d" % i))
    for _ in range(3):
        env.checkpoint([h], cp)
    cp.close()
    topic_dirs = os.listdir(os.path.join(env.data_dir, "topics"))
    names = sorted(os.listdir(os.path.join(env.data_dir, "topics", topic_dirs[0])))
    firsts = sorted({int(n[4:20]) for n in names})
    assert firsts and firsts[0] >= 41, names            # segments wholly below 46 are gone
    assert seqs(diff(h, "c")) == list(range(46, 61))
    h.restart(crash=True)
    assert seqs(diff(h, "c")) == list(range(46, 61)) and h.get("c")["count"] == 15
    h.crash()


def test_retain_applies_ttl_to_an_idle_topic(env):
    clock = ManualClock()
    h = env.single(clock=clock)
    h.put("idle", ttl_ms=50)
    h.append("idle", rec(b"1"), rec(b"2"))
    clock.now += 100
    assert h.call(Retain())["topics"] == 1
    idle = h.core.registry.topics["idle"]
    assert idle.expiry_floor == 2 and idle.count == 0
    h.crash()


def test_a_failed_watermark_commit_moves_no_floor(env, ffs):
    clock = ManualClock()
    h = env.single(clock=clock)
    h.put("t", ttl_ms=50, durable=True)
    h.append("t", rec(b"1"))
    clock.now += 100
    ffs.fail("sync_data")
    replies = h.batch(GetTopic("t", touch=False))
    assert replies[0]["earliest_seq"] == 1 and replies[0]["count"] == 1
    assert h.get("t")["earliest_seq"] == 2               # the retry succeeds
    h.crash()
