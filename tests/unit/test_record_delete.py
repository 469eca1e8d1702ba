"""Permanent record deletes (spec/api.md 5.7, spec/storage.md 3.3 and invariants 37-41):
point in time, silent, never resurrected through restarts and checkpoints."""

from __future__ import annotations

import pytest

from tools.testing.shard_harness import rec
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Absorbed, Append, Checkpoint, DeleteRecords, Diff
from topics_actors.ledger.delete_rules import parse_match
from topics_actors.ledger.tag_index import PATTERNS_MAX, TRIM_MIN, TagIndex
from topics_actors.storage.frame_body import MATCH_EQ, MATCH_GLOB


def seqs(h, topic: str, from_seq: int = 0) -> list[int]:
    return [r[0] for r in h.records(topic, from_seq)]


def fill(h, topic: str, n: int, **config) -> None:
    h.put(topic, durable=True, **config)
    for i in range(1, n + 1):
        h.append(topic, rec(b"%d" % i, tag=("even" if i % 2 == 0 else f"odd-{i}")))


def test_parse_match_forms():
    assert parse_match(["tag", "Eq", "a"]) == (MATCH_EQ, "a")
    assert parse_match(["tag", "Glob", "ab*"]) == (MATCH_GLOB, "ab")
    assert parse_match("a") == (MATCH_EQ, "a") and parse_match("a*") == (MATCH_GLOB, "a")
    for bad in (["tag", "Glob", "ab"], ["tag", "Ne", "a"], ["node", "Eq", "a"], ["tag", "Eq"],
                [1, 2, 3], 5, {"tag": "a"}):
        with pytest.raises(TopicsError):
            parse_match(bad)


def test_before_seq_delete_is_silent_and_moves_earliest(shard):
    fill(shard, "d", 5)
    reply = shard.call(DeleteRecords("d", before_seq=3))
    assert (reply["deleted"], reply["earliest_seq"], reply["count"]) == (2, 3, 3)
    diff = shard.call(Diff("d", 0))
    assert diff["tombstone"] is None and [r[0] for r in diff["records"]] == [3, 4, 5]
    assert shard.get("d")["earliest_seq"] == 3


def test_tag_delete_is_point_in_time_and_leaves_holes(shard):
    fill(shard, "t", 6)
    replies = shard.batch(DeleteRecords("t", match="even"), Append("t", [rec(b"7", "even")]))
    assert replies[0]["deleted"] == 3 and replies[0]["head_seq"] == 6
    assert seqs(shard, "t") == [1, 3, 5, 7]          # the later append is untouched
    assert shard.call(DeleteRecords("t", match="odd-*", before_seq=4))["deleted"] == 2
    assert seqs(shard, "t") == [5, 7] and shard.get("t")["earliest_seq"] == 5


def test_deletes_need_a_selector_and_a_topic(shard):
    with pytest.raises(TopicsError) as none:
        shard.call(DeleteRecords("missing"))
    assert none.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(TopicsError) as missing:
        shard.call(DeleteRecords("missing", before_seq=2))
    assert missing.value.code == ErrorCode.TOPIC_NOT_FOUND


@pytest.mark.parametrize("crash", [True, False])
def test_deleted_records_never_come_back(env, crash):
    h = env.single(file_bytes=4096)
    cp = env.checkpointer(max_events=4)
    fill(h, "x", 20)
    h.call(DeleteRecords("x", match="even"))
    env.checkpoint([h], cp)                          # del bytes flipped in segments
    h.call(DeleteRecords("x", before_seq=5))
    h.call(DeleteRecords("x", match="odd-9"))
    want = [s for s in range(5, 21) if s % 2 and s != 9]
    for _ in range(3):
        h.restart(crash=crash)
        assert seqs(h, "x") == want and h.get("x")["count"] == len(want)
        env.checkpoint([h], cp)
    h.restart(crash=crash)
    assert seqs(h, "x") == want and h.call(Diff("x", 0))["tombstone"] is None
    cp.close()
    h.crash()


def test_tag_index_is_built_once_and_kept_current(shard):
    """The first delete by tag builds the index (here of every tag: its match is `*`);
    appends after it are indexed, so a later delete finds them, and a delete reads only the
    records its tag names."""
    fill(shard, "ix", 6)
    topic = shard.core.registry.topics["ix"]
    assert topic.tags is None
    first = DeleteRecords("ix", match=["tag", "Glob", "*"], before_seq=2)
    assert shard.call(first)["deleted"] == 1
    assert topic.tags is not None
    shard.call(Append("ix", [rec(b"7", "odd-7"), rec(b"8", "even"), rec(b"9", "late")]))
    reads = []
    real = shard.core.reader.read
    shard.core.reader.read = lambda t, s: reads.append(s) or real(t, s)
    try:
        assert shard.call(DeleteRecords("ix", match="even"))["deleted"] == 4
    finally:
        del shard.core.reader.read
    assert reads == [2, 4, 6, 8]                       # no scan of the other records
    assert shard.call(DeleteRecords("ix", match=["tag", "Glob", "odd-*"]))["deleted"] == 3
    assert seqs(shard, "ix") == [9]


def test_tag_index_forgets_the_records_below_the_floor_of_every_tag():
    """A capped topic's index holds its live records, not every record ever appended: the
    seqs under the floor go from every tag (one no delete names, too), every TRIM_MIN adds,
    and a tag with none left goes."""
    index = TagIndex()
    for seq in range(1, 3 * TRIM_MIN + 1):
        index.add("keep" if seq % 4 else "drop", seq)
    index.add("once", 3 * TRIM_MIN + 1)
    index.trim(2 * TRIM_MIN)
    assert min(index.seqs["keep"]) > 2 * TRIM_MIN and min(index.seqs["drop"]) > 2 * TRIM_MIN
    assert len(index.seqs["keep"]) + len(index.seqs["drop"]) == TRIM_MIN
    index.trim(3 * TRIM_MIN + 1)                 # fewer than TRIM_MIN added since: later
    assert "once" in index.seqs
    index.add("late", 3 * TRIM_MIN + 2)
    for seq in range(3 * TRIM_MIN + 3, 4 * TRIM_MIN + 3):
        index.add("keep", seq)
    index.trim(3 * TRIM_MIN + 1)
    assert "once" not in index.seqs and "drop" not in index.seqs
    assert index.tags == ["keep", "late"]
    assert list(index.candidates(MATCH_GLOB, "", 0, 1 << 62))[:1] == [3 * TRIM_MIN + 3]


def test_a_capped_topics_tag_index_stays_at_its_live_records(shard):
    shard.put("cap", durable=True, cap_records=100)
    shard.call(Append("cap", [rec(b"0", "keep")]))
    shard.call(DeleteRecords("cap", match="drop"))             # index built
    for start in range(0, 4 * TRIM_MIN, 50):
        shard.call(Append("cap", [rec(b"%d" % i, "drop" if i % 4 == 0 else "keep")
                                  for i in range(start, start + 50)]))
    index = shard.core.registry.topics["cap"].tags
    assert sum(len(seqs) for seqs in index.seqs.values()) <= 100 + TRIM_MIN
    assert shard.call(DeleteRecords("cap", match="drop"))["deleted"] == 25


def test_tag_index_holds_only_the_tags_deletes_named(shard):
    """A topic deleting `drop` keeps no seqs of its `keep` records; a delete naming a tag
    the index does not cover builds it again (finding every match), and a glob covers the
    tags it names."""
    fill(shard, "nm", 8)
    shard.call(DeleteRecords("nm", match="odd-1"))
    index = shard.core.registry.topics["nm"].tags
    assert set(index.seqs) == {"odd-1"} and index.matches() == [(MATCH_EQ, "odd-1")]
    shard.call(Append("nm", [rec(b"9", "odd-9"), rec(b"10", "even")]))
    assert set(shard.core.registry.topics["nm"].tags.seqs) == {"odd-1"}
    assert shard.call(DeleteRecords("nm", match="even"))["deleted"] == 5
    index = shard.core.registry.topics["nm"].tags
    assert set(index.seqs) == {"even"} and not index.covers(MATCH_GLOB, "odd-")   # rebuilt
    assert shard.call(DeleteRecords("nm", match="odd-*"))["deleted"] == 4
    index = shard.core.registry.topics["nm"].tags
    assert index.covers(MATCH_EQ, "odd-77") and index.covers(MATCH_EQ, "even")
    shard.call(Append("nm", [rec(b"11", "odd-11"), rec(b"12", "other")]))
    assert "other" not in index.seqs and list(index.seqs["odd-11"]) == [11]
    assert shard.call(DeleteRecords("nm", match="odd-11"))["deleted"] == 1
    assert seqs(shard, "nm") == [12]
    many = TagIndex([(MATCH_EQ, str(n)) for n in range(PATTERNS_MAX + 1)])
    assert many.covers(MATCH_GLOB, "") and many.matches() == [(MATCH_GLOB, "")]


def test_tag_index_skips_records_below_the_floors(shard):
    fill(shard, "fl", 6)
    shard.call(DeleteRecords("fl", match="odd-5"))              # index built
    shard.call(DeleteRecords("fl", before_seq=5))               # 1..4 gone silently
    reply = shard.call(DeleteRecords("fl", match="even"))
    assert reply["deleted"] == 1 and seqs(shard, "fl") == []    # only 6 was still live


def test_a_delete_after_the_barrier_holds_once_its_records_are_absorbed(env):
    """The records are absorbed by a snapshot whose barrier came before the delete's frame:
    their del bytes are not flipped yet, and the shard must still not serve them."""
    h = env.single()
    fill(h, "late", 6)
    reply = h.call(Checkpoint())
    h.call(DeleteRecords("late", match="even"))
    cp = env.checkpointer()
    try:
        snap = cp.checkpoint({reply["group"]: (reply["idx"], reply["offset"])},
                             accounting=reply["accounting"])
    finally:
        cp.close()
    h.call(Absorbed(snap))
    assert seqs(h, "late") == [1, 3, 5]
    assert h.get("late")["count"] == 3
    env.checkpoint([h])                    # the delete's frame absorbed: bytes flipped
    h.restart()
    assert seqs(h, "late") == [1, 3, 5]
