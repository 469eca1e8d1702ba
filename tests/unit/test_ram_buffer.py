"""An ephemeral topic's RAM buffer keeps to its live records (shard/ram_buffer.py).

| id | what |
|---|---|
| RB-1 | a capped ephemeral topic under many appends holds about its cap in memory, and every
  live record reads back as written |
| RB-2 | records below a delete floor go with the next trim; deleted-by-tag ones stay gone |
| RB-3 | an uncapped topic's buffer only grows (nothing is dead), and is never copied |
| RB-4 | a topic switched to a logged class after a trim keeps its ephemeral records
  readable, through a checkpoint too |
"""

from __future__ import annotations

import pytest

from topics_actors.protocol.messages import Append, DeleteRecords
from topics_actors.shard.ram_buffer import TRIM_BYTES_MIN, TRIM_FRACTION

pytestmark = pytest.mark.timeout(60)

PAD = "x" * 200


def _batch(start: int, count: int, tag: str | None = None) -> list:
    return [[f'{{"n":{n},"p":"{PAD}"}}'.encode(), tag, None, None]
            for n in range(start, start + count)]


def _ram(shard, name: str) -> bytearray:
    return shard.core.registry.get(name).ram


def _numbers(shard, name: str) -> list[int]:
    return [int(r[2].split(b'"n":')[1].split(b",")[0]) for r in shard.records(name)]


def test_a_capped_ephemeral_topic_holds_about_its_cap(shard):   # RB-1
    shard.put("e", durability="ephemeral", cap_records=1000)
    files_before = len(shard.core.wal.files._views)
    for start in range(0, 40_000, 100):
        shard.call(Append("e", _batch(start, 100)))
    topic = shard.core.registry.get("e")
    live = sum(len(b) for b in (r[2] for r in shard.records("e")))
    assert live > 0 and len(topic.ram) <= live * 2 / (1 - TRIM_FRACTION) + TRIM_BYTES_MIN
    assert len(topic.locs) <= 1000 + 40_000 * TRIM_FRACTION
    assert _numbers(shard, "e") == list(range(39_000, 40_000))
    state = shard.get("e")
    assert (state["head_seq"], state["count"], state["earliest_seq"]) == (40_000, 1000, 39_001)
    assert len(shard.core.wal.files._views) == files_before + 1   # old buffers are gone


def test_deleted_records_go_with_the_next_trim(shard):   # RB-2
    shard.put("e", durability="ephemeral")
    for start in range(0, 8000, 100):
        shard.call(Append("e", _batch(start, 50, "keep") + _batch(start + 50, 50, "drop")))
    shard.call(DeleteRecords("e", match="drop"))
    shard.call(DeleteRecords("e", before_seq=7001))
    size = len(_ram(shard, "e"))
    shard.call(Append("e", _batch(8000, 100, "keep")))
    assert len(_ram(shard, "e")) < size / 2
    kept = [n for n in range(7000, 8100) if n >= 8000 or n % 100 < 50]
    assert _numbers(shard, "e") == kept
    assert not shard.core.registry.get("e").deleted or min(
        shard.core.registry.get("e").deleted) > 7000


def test_an_uncapped_buffer_is_never_copied(shard):   # RB-3
    shard.put("e", durability="ephemeral")
    buffers = set()
    for start in range(0, 8000, 100):
        shard.call(Append("e", _batch(start, 100)))
        buffers.add(id(_ram(shard, "e")))
    assert len(buffers) == 1 and len(_ram(shard, "e")) > TRIM_BYTES_MIN
    assert _numbers(shard, "e") == list(range(8000))


def test_a_topic_that_became_logged_keeps_its_ephemeral_records(env, shard):   # RB-4
    shard.put("e", durability="ephemeral", cap_records=2000)
    for start in range(0, 12_000, 100):
        shard.call(Append("e", _batch(start, 100)))
    assert shard.core.registry.get("e").wal_base > 1          # trimmed
    shard.put("e", durability="disk", cap_records=2000)
    shard.call(Append("e", _batch(12_000, 100)))
    env.checkpoint([shard])
    shard.call(Append("e", _batch(12_100, 100)))
    assert _numbers(shard, "e") == list(range(10_200, 12_200))
