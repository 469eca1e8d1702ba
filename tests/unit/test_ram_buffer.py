"""An ephemeral topic's RAM chunks keep to its live records (shard/ram_buffer.py).

| id | what |
|---|---|
| RB-1 | a capped ephemeral topic under many appends holds its live frames and at most two
  chunks more, and every live record reads back as written |
| RB-2 | records below a delete floor go with the chunks that held them; deleted-by-tag ones
  stay gone |
| RB-3 | an uncapped topic keeps every chunk; closed chunks are bytes of their exact size |
| RB-4 | a topic switched to a logged class after a trim keeps its ephemeral records
  readable, through a checkpoint too |
| RB-5 | deleting the topic releases every chunk |
"""

from __future__ import annotations

import pytest

from topics_actors.protocol.messages import Append, DeleteRecords, DeleteTopic, Status
from topics_actors.shard.ram_buffer import CHUNK_BYTES, INDEX_TRIM_MIN, ram_bytes, ram_files

pytestmark = pytest.mark.timeout(60)

PAD = "x" * 200


def _batch(start: int, count: int, tag: str | None = None) -> list:
    return [[f'{{"n":{n},"p":"{PAD}"}}'.encode(), tag, None, None]
            for n in range(start, start + count)]


def _numbers(shard, name: str) -> list[int]:
    return [int(r[2].split(b'"n":')[1].split(b",")[0]) for r in shard.records(name)]


def _views(shard) -> set[int]:
    return set(shard.core.wal.files._views)


def test_a_capped_ephemeral_topic_holds_its_live_frames(shard):   # RB-1
    shard.put("e", durability="ephemeral", cap_records=1000)
    before = _views(shard)
    for start in range(0, 40_000, 100):
        shard.call(Append("e", _batch(start, 100)))
    topic = shard.core.registry.get("e")
    frames = 250 * 1000              # a record's frame here is under 250 bytes
    assert ram_bytes(topic) <= frames + 2 * CHUNK_BYTES
    assert len(topic.locs) <= 1000 + max(INDEX_TRIM_MIN, 40_000 // 4)
    assert _numbers(shard, "e") == list(range(39_000, 40_000))
    state = shard.get("e")
    assert (state["head_seq"], state["count"], state["earliest_seq"]) == (40_000, 1000, 39_001)
    assert _views(shard) - before == set(ram_files(topic))        # dropped chunks are gone
    assert shard.call(Status())["ram_bytes"] == ram_bytes(topic)


def test_deleted_records_go_with_their_chunks(shard):   # RB-2
    shard.put("e", durability="ephemeral")
    for start in range(0, 8000, 100):
        shard.call(Append("e", _batch(start, 50, "keep") + _batch(start + 50, 50, "drop")))
    shard.call(DeleteRecords("e", match="drop"))
    shard.call(DeleteRecords("e", before_seq=7001))
    topic = shard.core.registry.get("e")
    size = ram_bytes(topic)
    shard.call(Append("e", _batch(8000, 100, "keep")))
    assert ram_bytes(topic) < size / 4
    kept = [n for n in range(7000, 8100) if n >= 8000 or n % 100 < 50]
    assert _numbers(shard, "e") == kept
    assert not topic.deleted or topic.deleted.first() > 7000


def test_an_uncapped_topic_keeps_every_chunk(shard):   # RB-3
    shard.put("e", durability="ephemeral")
    for start in range(0, 8000, 100):
        shard.call(Append("e", _batch(start, 100)))
    topic = shard.core.registry.get("e")
    assert len(topic.ram_chunks) >= 4
    for file_no, _last, size in topic.ram_chunks:
        view = shard.core.wal.files._views[file_no]
        assert type(view) is bytes and len(view) == size >= CHUNK_BYTES
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


def test_deleting_the_topic_releases_every_chunk(shard):   # RB-5
    before = _views(shard)
    shard.put("e", durability="ephemeral")
    for start in range(0, 4000, 100):
        shard.call(Append("e", _batch(start, 100)))
    assert len(_views(shard) - before) >= 3
    shard.call(DeleteTopic("e"))
    assert _views(shard) == before
