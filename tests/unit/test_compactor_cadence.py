"""When the compactor checkpoints: WAL growth since the last barrier, or time with writes."""

from __future__ import annotations

from topics_actors.compactor.compactor_server import Cadence

MIB = 1024 * 1024
CADENCE = Cadence(checkpoint_wal_bytes=64 * MIB, checkpoint_interval_ms=60_000,
                  wal_file_bytes=64 * MIB)


def test_wal_bytes_spans_files():
    assert CADENCE.wal_bytes((3, 100), (3, 40)) == 60
    assert CADENCE.wal_bytes((4, 10), (3, 64 * MIB - 10)) == 20


def test_due_when_one_shard_has_written_enough():
    since = {"0001/shard-00": (1, 0), "0001/shard-01": (1, 0)}
    grown = {"0001/shard-00": (1, 10), "0001/shard-01": (2, 0)}
    assert CADENCE.due(grown, since, idle_ms=0)
    assert not CADENCE.due({"0001/shard-00": (1, 10), "0001/shard-01": (1, 64 * MIB - 1)},
                           since, idle_ms=0)


def test_due_after_the_interval_only_when_something_was_written():
    since = {"0001/shard-00": (2, 500)}
    assert not CADENCE.due({"0001/shard-00": (2, 500)}, since, idle_ms=10 ** 9)
    assert not CADENCE.due({"0001/shard-00": (2, 501)}, since, idle_ms=59_999)
    assert CADENCE.due({"0001/shard-00": (2, 501)}, since, idle_ms=60_000)


def test_a_group_without_a_checkpoint_counts_from_the_start_of_its_first_file():
    assert CADENCE.due({"0002/shard-00": (1, 46)}, {}, idle_ms=60_000)
    assert not CADENCE.due({"0002/shard-00": (1, 0)}, {}, idle_ms=60_000)
