"""The reclaimer's segment upkeep: the sweep of unlisted files and the cold tier.

Invariants: a relocated segment reads byte-identical from the cold tier (live and after a
restart); a del byte flipped on the hot copy during the copy reaches the cold copy; deletes
of cold records hold after their WAL frames are gone; the sweep never runs during a
checkpoint (segment lock) and removes dropped segments from both tiers; a crash at any
mutating call of a pass loses nothing, and the next pass finishes the move.
"""

from __future__ import annotations

import os

import pytest

from tools.testing.shard_harness import ShardEnv, rec
from tests.unit.test_checkpoint_faults import CrashPoint, SweepFs
from topics_actors import fsck
from topics_actors.protocol.messages import DeleteRecords, DeleteTopic
from topics_actors.reclaimer.segment_upkeep import SegmentUpkeep
from topics_actors.storage import segment, segment_sweep
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import DEL_DELETED, data_path, flip_deleted, idx_entry
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers

pytestmark = pytest.mark.timeout(60)

LIMITS = {"max_events": 4}
RECORDS = 18          # segments of 4: 4 sealed + 1 open of 2


def seg_firsts(root: str) -> dict[str, list[int]]:
    """Topic dir name -> first seqs of the complete segments (.data and .idx) under root."""
    topics = os.path.join(root, "topics")
    if not os.path.isdir(topics):
        return {}
    out = {}
    for name in sorted(os.listdir(topics)):
        files = segment.list_segment_files(RealFs(), os.path.join(topics, name))
        out[name] = sorted(f for f, parts in files.items() if parts == {"data", "idx"})
    return out


class Cold:
    def __init__(self, tmp_path, fs=None):
        self.cold_dir = str(tmp_path / "cold")
        self.env = ShardEnv(str(tmp_path / "data"), fs or SweepFs())
        os.makedirs(self.env.data_dir)
        self.h = self.env.single(cold_dir=self.cold_dir)
        self.cp = self.env.checkpointer(cold_dir=self.cold_dir, **LIMITS)
        self.tiers = Tiers(self.env.data_dir, self.cold_dir)
        self.lock = SegmentLock(self.env.data_dir)

    def fill(self, topic: str = "c", n: int = RECORDS) -> list:
        self.h.put(topic, durable=True)
        for i in range(n):
            self.h.append(topic, rec(b'"r%d"' % i, tag="even" if i % 2 else "odd"))
        return self.h.records(topic)

    def checkpoint(self) -> int:
        return self.env.checkpoint([self.h], self.cp)

    def upkeep(self, retain: int = 1) -> SegmentUpkeep:
        return SegmentUpkeep(self.env.fs, self.tiers, self.lock, retain)

    def report(self) -> fsck.Report:
        return fsck.check(self.env.data_dir, cold_dir=self.cold_dir)


@pytest.fixture
def cold(tmp_path):
    world = Cold(tmp_path)
    yield world
    if world.h.core is not None:
        world.h.crash()
    world.cp.close()


def test_old_sealed_segments_move_cold_and_read_the_same(cold):
    before = cold.fill()
    cold.checkpoint()
    assert cold.upkeep(retain=1).run() == {"removed": 0, "relocated": 3}
    (name,) = seg_firsts(cold.env.data_dir)
    assert seg_firsts(cold.env.data_dir)[name] == [13, 17]     # newest sealed + the open one
    assert seg_firsts(cold.cold_dir)[name] == [1, 5, 9]
    assert cold.h.records("c") == before                       # live shard, old mappings
    cold.h.restart()
    assert cold.h.records("c") == before                       # mapped from the cold tier
    report = cold.report()
    assert report.ok and report.orphan_segments == 0, report.problems
    assert cold.upkeep(retain=1).run() == {"removed": 0, "relocated": 0}   # idempotent


def test_a_flip_during_the_copy_reaches_the_cold_copy(cold, monkeypatch):
    cold.fill()
    cold.checkpoint()
    upkeep = cold.upkeep(retain=3)
    hot_dir = cold.tiers.data_dir + "/" + cold.cp.ledger.dirs[cold.h.core.registry.topics["c"].tid]
    real_acquire = upkeep.lock.acquire

    def compactor_flips_first(*args):
        flip_deleted(cold.env.fs, hot_dir, 1, 2)    # as a checkpoint would, before the lock
        return real_acquire(*args)
    monkeypatch.setattr(upkeep.lock, "acquire", compactor_flips_first)
    assert upkeep.run()["relocated"] == 1
    cold_dir = cold.tiers.cold_of(hot_dir)
    with open(data_path(cold_dir, 1), "rb") as f:
        data = f.read()
    with open(segment.idx_path(cold_dir, 1), "rb") as f:
        offset, length, _, _ = idx_entry(f.read(), 1, 2)
    assert data[offset + length - 1] == DEL_DELETED


def test_deletes_of_cold_records_hold_after_their_wal_is_gone(cold):
    cold.fill()
    cold.checkpoint()
    cold.upkeep(retain=0).run()
    assert cold.h.call(DeleteRecords("c", match="odd"))["deleted"] == RECORDS // 2
    left = cold.h.records("c")
    for _ in range(3):                     # the Delete frame is absorbed, then its WAL goes
        cold.h.append("other", rec())
        cold.checkpoint()
    cold.h.restart()
    assert cold.h.records("c") == left and all(r[3] == "even" for r in left)


def test_sweep_waits_for_a_checkpoint_and_clears_both_tiers(cold):
    cold.fill()
    cold.checkpoint()
    cold.upkeep(retain=0).run()
    cold.h.call(DeleteTopic("c"))
    cold.checkpoint()
    cold.checkpoint()                       # no kept snapshot lists the topic now
    holder = SegmentLock(cold.env.data_dir)
    assert holder.try_acquire()             # a checkpoint in progress
    try:
        assert cold.upkeep().sweep() == 0
    finally:
        holder.release()
    assert cold.upkeep().sweep() > 0
    assert seg_firsts(cold.env.data_dir) == {} and seg_firsts(cold.cold_dir) == {}


def dry_run_calls(tmp_path) -> int:
    world = Cold(tmp_path / "dry")
    world.fill()
    world.checkpoint()
    before = world.env.fs.mutations()
    world.upkeep().run()
    world.h.crash()
    world.cp.close()
    return world.env.fs.mutations() - before


def test_a_crash_at_any_call_of_a_pass_loses_nothing(tmp_path):
    calls = dry_run_calls(tmp_path)
    assert calls > 10
    for n in range(calls + 1):
        world = Cold(tmp_path / f"p{n}")
        before = world.fill()
        world.checkpoint()
        world.env.fs.die_at = world.env.fs.mutations() + n
        try:
            world.upkeep().run()
        except CrashPoint:
            pass
        world.env.fs.die_at = None
        world.lock.release()                # the dead process's descriptor closes
        world.h.restart()
        assert world.h.records("c") == before, n
        world.upkeep().run()                # the next pass finishes the move
        assert seg_firsts(world.cold_dir) != {}, n
        assert world.h.records("c") == before, n
        report = world.report()
        assert report.ok and report.orphan_segments == 0, (n, report.problems)
        world.h.crash()
        world.cp.close()


def test_a_pass_without_a_new_snapshot_decodes_nothing(cold, monkeypatch):
    cold.fill()
    cold.checkpoint()
    upkeep = cold.upkeep(retain=1)
    assert upkeep.run()["relocated"] == 3

    def must_not_read(*_args):
        raise AssertionError("the snapshots were decoded again")
    monkeypatch.setattr(segment_sweep, "snapshot_bodies", must_not_read)
    assert upkeep.run() == {"removed": 0, "relocated": 0}
    monkeypatch.undo()
    read = []
    real = segment_sweep.snapshot_bodies
    monkeypatch.setattr(segment_sweep, "snapshot_bodies",
                        lambda *args: read.append(1) or real(*args))
    cold.h.append("c", rec(b'"more"'))
    cold.checkpoint()                      # a new snapshot (its test sweep reads once) ...
    read.clear()
    assert upkeep.run() == {"removed": 0, "relocated": 0}
    assert read == [1]                     # ... and the next pass looks again
