"""Checkpoints under faults (spec/storage.md 3.1, 4, 5.1; invariants 1, 3, 4, 24, 26, 48, 51):
a checkpoint that fails or dies at any mutating call loses no acked record and leaves no
orphan behind the next one; a failed snapshot write deletes nothing; a corrupt segment record
is an error, never wrong data; a corrupt newest snapshot falls back to the previous one.

The crash-point sweep replays one deterministic workload per point in a fresh data dir: a
dry run records every mutating call of a successful checkpoint (the shard's barrier, the
compactor's segment and snapshot writes, the shard's Absorbed), then each run fails (EIO)
or dies (CrashPoint, raised before the call and at every later one) at one of them.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import (
    Absorbed, Append, DeleteTopic, Diff, GetTopic, RepairTopic,
)
from topics_actors.shard.record_append import HEAD_RESERVE
from topics_actors.storage import failpoint
from tools.testing.fault_fs import MUTATING, FaultFs
from topics_actors.storage.segment import IDX_ENTRY, data_path, idx_path
from topics_actors.storage.snapshot import HEADER_BYTES, snapshot_path
from tools.testing.shard_harness import ShardEnv, rec
from tests.unit.test_checkpoint import (
    barrier, body, bulk, checkpoint_idx, seg_files, snapshot_ids, state, wal_idxs,
)

LIMITS = {"max_events": 5}
PARTS = 11


class CrashPoint(BaseException):
    """The process dies here: no handler of the engine may run."""


class SweepFs(FaultFs):
    """A FaultFs that records the mutating calls (op, index in its class) or dies at one."""

    def __init__(self):
        super().__init__()
        self.log: list[tuple[str, int]] | None = None
        self.die_at: int | None = None            # in mutations()

    def _tick(self, op: str, what: str = "") -> str | None:
        if op in MUTATING:
            if self.die_at is not None and self.mutations() >= self.die_at:
                raise CrashPoint(f"{op} {what}")
            if self.log is not None:
                self.log.append((op, self.counts[op]))
        return super()._tick(op, what)


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0xFF]))


def workload(env) -> tuple:
    """Returns (harness, checkpointer, acked records per topic)."""
    h = env.single(file_bytes=2048)
    cp = env.checkpointer(**LIMITS)
    h.put("f", durable=True)
    h.put("d")
    h.put("m", durability="memory")
    replies = h.batch(*[Append(name, [rec(b'"%s%d"' % (name.encode(), i), "tg", "nd",
                                          b"[%d]" % i)])
                        for i in range(8) for name in ("f", "d", "m")])
    env.checkpoint([h], cp)
    h.call(DeleteTopic("m"))
    h.put("m", durability="memory")            # a new incarnation: a new segment directory
    replies += h.batch(*[Append(name, [rec(b'"%s%d"' % (name.encode(), i))])
                         for i in range(8, 14) for name in ("f", "d", "m")])
    assert all(isinstance(r, dict) for r in replies)
    env.fs.fail("write_at")
    assert isinstance(h.batch(Append("f", [rec(b'"never acked"')]))[0], TopicsError)
    env.fs.clear()
    return h, cp, {name: h.records(name) for name in ("f", "d", "m")}


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> list[tuple[str, int]]:
    """Every mutating call (op, index in its class) of the checkpoint after the workload."""
    fs = SweepFs()
    env = ShardEnv(str(tmp_path_factory.mktemp("dry")), fs)
    h, cp, _ = workload(env)
    fs.log = []
    env.checkpoint([h], cp)
    calls, fs.log = fs.log, None
    h.crash()
    cp.close()
    assert {op for op, _ in calls} >= {"write_at", "sync_data", "open", "rename", "remove",
                                       "sync_dir", "makedirs", "sync_all"}
    return calls


def unlisted_segments(data_dir: str) -> tuple[set, set]:
    """(segment files no kept snapshot lists, segments the newest lists that are missing)."""
    ids = snapshot_ids(data_dir)
    assert 1 <= len(ids) <= 2
    assert not [n for n in os.listdir(os.path.join(data_dir, "meta")) if n.endswith(".tmp")]
    listed = [{(e["dir"], s[0]) for e in body(data_dir, i)["topics"] for s in e["segments"]}
              for i in ids]
    files = seg_files(data_dir)
    present = {(d, first) for d, segments in files.items() for first in segments}
    complete = {(d, first) for d, segments in files.items()
                for first, parts in segments.items() if None not in parts}
    return present - set().union(*listed), listed[0] - complete


def check_recovered(h, acked: dict, restarted: bool = True) -> None:
    for name, records in acked.items():
        assert h.records(name) == records, name        # byte-identical, nothing unacked
    assert h.get("f")["head_seq"] == 14 and h.get("m")["head_seq"] == 6   # m: recreated
    # disk class: a crash restart pads the head to the reservation taken at seq 1
    assert h.get("d")["head_seq"] == (1 + HEAD_RESERVE if restarted else 14)


def sweep_point(tmp_path, calls: list, n: int, mode: str) -> None:
    fs = SweepFs()
    env = ShardEnv(str(tmp_path / f"{mode}-{n}"), fs)
    os.makedirs(env.data_dir)
    h, cp, acked = workload(env)
    if mode == "crash":
        fs.die_at = fs.mutations() + n
    else:
        fs.fail(*calls[n])
    # A failed unlink of an absorbed WAL file is no error: the next snapshot retries it.
    failing = n < len(calls) and not (mode != "crash" and calls[n][0] == "remove")
    try:
        env.checkpoint([h], cp)
    except (OSError, TopicsError, CrashPoint):
        assert failing
    else:
        assert not failing
    fs.clear()
    fs.die_at = None
    if mode == "retry":                 # no crash: the same shard and compactor go on
        check_recovered(h, acked, restarted=False)
    else:
        h.crash()
        cp.close()
        h.start()
        check_recovered(h, acked)
        cp = env.checkpointer(**LIMITS)
    env.checkpoint([h], cp)
    assert unlisted_segments(env.data_dir) == (set(), set())
    if mode != "retry":                 # a restarted shard keeps one snapshot's WAL back
        previous = snapshot_ids(env.data_dir)[1]
        assert wal_idxs(h)[0] >= checkpoint_idx(env.data_dir, previous)
    check_recovered(h, acked, restarted=mode != "retry")
    h.restart(crash=True)
    check_recovered(h, acked)
    h.crash()
    cp.close()


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.parametrize("mode", ["eio", "crash", "retry"])
def test_checkpoint_fails_or_dies_at_every_mutating_call(tmp_path, dry_run, mode, part):
    """Invariants 1, 3, 4, 48: at every mutating call of a checkpoint: fail it once (then
    crash both processes, or let both go on) or die there; then a restart keeps every acked
    record byte-identical, a checkpoint succeeds and leaves no orphan segment file."""
    points = range(len(dry_run) + (mode == "crash"))  # dying after the last call too
    for n in points[part::PARTS]:
        sweep_point(tmp_path, dry_run, n, mode)


def test_the_sweep_workload_checkpoints_cleanly(tmp_path, dry_run):
    env = ShardEnv(str(tmp_path / "clean"), FaultFs())
    os.makedirs(env.data_dir)
    h, cp, acked = workload(env)
    before = env.fs.mutations()
    assert env.checkpoint([h], cp) == 2
    assert env.fs.mutations() - before == len(dry_run)
    assert unlisted_segments(env.data_dir) == (set(), set())
    check_recovered(h, acked, restarted=False)
    h.crash()
    cp.close()


# --- a failed snapshot write ------------------------------------------------------------------

@pytest.mark.parametrize("how", ["failpoint", "rename", "sync_all", "enospc"])
def test_failed_snapshot_write_deletes_nothing(env, monkeypatch, how):
    """Invariants 24, 26: the checkpoint raises, the previous snapshot stays the newest, no
    file is removed, and the same Checkpointer (reloaded) succeeds next time."""
    h = env.single(file_bytes=2048)
    cp = env.checkpointer()
    for rnd in range(2):
        bulk(h, label=b"%d" % rnd)
        env.checkpoint([h], cp)
    bulk(h, label=b"2")
    before, files = state(h), _all_files(env.data_dir)
    barriers = barrier(h)
    if how == "failpoint":
        monkeypatch.setattr(failpoint, "_ARMED", {"snapshot::before_rename": "raise"})
    elif how == "enospc":                                # a full device: segments too
        env.fs.fail("write_at", kind="enospc", always=True)
    else:
        env.fs.fail(how)
    with pytest.raises(OSError):
        cp.checkpoint(barriers)
    monkeypatch.setattr(failpoint, "_ARMED", {})
    env.fs.clear()
    assert snapshot_ids(env.data_dir) == [2, 1] and cp.snapshot_id == 2
    assert files <= _all_files(env.data_dir)             # nothing removed
    assert h.call(Absorbed(2))["removed_files"] == 0     # already taken in: a no-op
    assert files <= _all_files(env.data_dir)
    assert state(h) == before
    wal_before = wal_idxs(h)
    assert env.checkpoint([h], cp) == 3
    keep_from = checkpoint_idx(env.data_dir, 2)
    assert [i for i in wal_before if i not in wal_idxs(h)] == [
        i for i in wal_before if i < keep_from]
    assert state(h) == before
    h.restart(crash=False)
    assert h.replay.snapshot_id == 3 and state(h) == before
    h.crash()
    cp.close()


def _all_files(data_dir: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), data_dir)
            for root, _, names in os.walk(data_dir) for name in names}


# --- corruption --------------------------------------------------------------------------------

FIELDS = {"frame_len": 0, "flags": 4, "seq": 5, "ts": 13, "tag": 29, "data": 33,
          "checksum": -9}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_corrupt_segment_record_is_an_error_never_wrong_data(env, field):
    """Invariant 51: a flipped byte of a sealed record is reported (internal), never served;
    the records around it and other topics still read."""
    h = env.single()
    h.put("a", durable=True)
    h.put("b", durable=True)
    for i in range(1, 11):
        h.batch(Append("a", [rec(b'"a-%d"' % i, "tag")]), Append("b", [rec(b'"b-%d"' % i)]))
    a_records, b_records = h.records("a"), h.records("b")
    env.checkpoint([h], env.checkpointer(max_events=4))
    seg_dir = h.core.registry.topics["a"].seg_dir
    assert h.core.registry.topics["a"].seg_firsts == [1, 5, 9]
    with open(idx_path(seg_dir, 5), "rb") as handle:
        offset, length, _, _ = IDX_ENTRY.unpack_from(handle.read(), 20)     # seq 6
    flip(data_path(seg_dir, 5), offset + FIELDS[field] % length)

    def check():
        for from_seq in (0, 4, 5):
            with pytest.raises(TopicsError) as error:
                h.call(Diff("a", from_seq))
            assert error.value.code is ErrorCode.INTERNAL
        assert h.call(Diff("a", 4, limit=1, include_tags=True))["records"] == a_records[4:5]
        assert h.records("a", 6) == a_records[6:]
        assert h.records("b") == b_records
    check()
    h.restart(crash=False)   # recovery checks the segments: "a" is quarantined, "b" serves
    with pytest.raises(TopicsError) as error:
        h.call(Diff("a", 0))
    assert error.value.code is ErrorCode.QUARANTINED
    assert h.records("b") == b_records
    assert h.call(RepairTopic("a"))["lost_records"] == 1
    kept = a_records[:5] + a_records[6:]          # seq 6 is a deleted record now
    assert h.records("a") == kept
    h.restart(crash=False)
    assert h.records("a") == kept and h.records("b") == b_records
    h.crash()


def test_corrupt_newest_snapshot_falls_back_to_the_previous_one(env):
    """The previous snapshot, the WAL since its checkpoint and its segments are kept, so a
    rotten newest snapshot loses nothing; a restarted compactor falls back the same way."""
    h = env.single(file_bytes=2048)
    cp = env.checkpointer(max_events=7)
    for rnd in range(4):
        bulk(h, "f", 15, b"%d" % rnd)
        bulk(h, "k", 15, b"%d" % rnd)
        if rnd == 2:
            h.call(DeleteTopic("k"))        # its segments stay for the previous snapshot
        env.checkpoint([h], cp)
    cp.close()
    assert wal_idxs(h)[0] > 1
    bulk(h, "f", 5, b"tail")
    h.restart(crash=False)
    before = state(h)
    flip(snapshot_path(env.data_dir, 4), HEADER_BYTES + 30)
    for crash in (True, False):
        h.restart(crash=crash)
        assert h.replay.snapshot_id == 3
        assert state(h) == before
    fresh = env.checkpointer(max_events=7)
    assert fresh.snapshot_id == 3
    # never the rotten file's id again: a shard that took snapshot 4 in would ignore it
    assert env.checkpoint([h], fresh) == 5
    assert state(h) == before
    h.restart(crash=True)
    assert h.replay.snapshot_id == 5 and state(h) == before
    h.crash()
    fresh.close()


# --- regressions (each failed before 627160a) ---------------------------------------------

@pytest.mark.parametrize("op", ["makedirs", "open", "write_at", "sync_data"])
def test_an_io_error_inside_the_wal_scan_is_raised_as_itself(env, op):
    """An OSError raised inside TopicLedger.scan (a segment starting or sealing) used to be
    replaced by a BufferError from Checkpointer.absorb_group closing the mapping that the
    traceback still exported through scan's memoryview."""
    h = env.single()
    for i in range(12):
        h.append("t", rec(b"%d" % i))
    cp = env.checkpointer(max_events=5)             # seals while scanning
    barriers = barrier(h)
    env.fs.fail(op)
    with pytest.raises(OSError, match="injected"):
        cp.checkpoint(barriers)
    env.fs.clear()
    assert env.checkpoint([h], cp) == 1
    cp.close()


def test_a_failed_reload_never_regresses_the_checkpointer(env):
    """Checkpointer.load() used to reset its state before reading the snapshot: an I/O error
    in the reload after a failed checkpoint left it empty, and its next checkpoints re-read
    the pruned WAL from (0, 0), wrote snapshot ids below the newest and swept the segments
    the newest lists ('segment ... is missing' after a restart)."""
    h = env.single(file_bytes=2048)
    cp = env.checkpointer()
    for rnd in range(4):
        bulk(h, label=b"%d" % rnd)
        env.checkpoint([h], cp)
    assert wal_idxs(h)[0] > 1                        # the topic's create frame is pruned
    before = state(h)
    barriers = barrier(h)
    env.fs.fail("rename")                                        # the snapshot write fails,
    env.fs.fail("open_read", at=env.fs.count("open_read") + 1)  # and one read of the reload
    with pytest.raises(OSError):                                 # (the first reads LAYOUT)
        cp.checkpoint(barriers)
    assert [op for op, _, _ in env.fs.fired] == ["rename", "open_read"]
    env.fs.clear()
    for _ in range(2):
        with contextlib.suppress(TopicsError, OSError):   # refusing is fine, losing is not
            env.checkpoint([h], cp)
    h.restart(crash=False)
    assert state(h) == before


def test_an_unlink_error_while_taking_in_a_snapshot_is_answered(env):
    """An OSError of a WAL unlink in Absorbed used to escape ShardCore.commit(): the turn's
    replies (the ack of a committed append too) were lost and the serve loop died."""
    h = env.single(file_bytes=2048)
    cp = env.checkpointer()
    for rnd in range(3):
        bulk(h, label=b"%d" % rnd)
        snap_id = env.checkpoint([h], cp, absorb=rnd < 2)
    assert wal_idxs(h)[0] < checkpoint_idx(env.data_dir, snap_id - 1)   # one to remove
    env.fs.fail("remove")
    replies = h.batch(Append("w", [rec(b'"x"')]), Absorbed(snap_id), GetTopic("w"))
    env.fs.clear()
    assert replies[0]["first_seq"] == 1 and replies[2]["head_seq"] == 1
    assert replies[1]["snapshot_id"] == snap_id and replies[1]["removed_files"] == 0
    assert env.checkpoint([h], cp) == snap_id + 1     # the files go with the next one
    assert wal_idxs(h)[0] >= checkpoint_idx(env.data_dir, snap_id)
    cp.close()
    h.crash()
