"""The mixed workload of the in-process crash and I/O-error sweeps, and its runner.

Two shards (ShardCore driven in process, as in tests/unit) and a compactor Checkpointer share
one Fs and a fake clock. The workload touches every durability class (ephemeral, memory,
disk, fsync), creates and deletes topics (one is created again: a new incarnation), appends
single writes and group-committed turns, deletes records by before_seq and by tag (Eq,
Glob), evicts by records cap (fsync, disk, memory), by byte cap and by TTL (Retain, lazy
retention on reads), hardens the disk tail (flush_due), rotates WAL files (small files),
checkpoints three times and restarts the shards in the middle (one cleanly, one by a
process crash). Everything is deterministic, so
the N-th mutating call of one run is the N-th of every run.

`Run` keeps the oracle (tests/fault/oracle.py) in step: an op's effect is applied when its
reply is a success, as in flight when the process died during it, never when it failed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random

from tests.fault.oracle import Recovered, TopicModel
from tools.testing.shard_harness import ShardEnv, ShardHarness
from tools.testing.crash_fs import CrashFs
from topics_actors import fsck
from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import (
    Append, DeleteRecords, DeleteTopic, Diff, PutTopic, RepairTopic, Retain,
)
from topics_actors.record_envelope import build as append_envelope
from topics_actors.storage import failpoint
from topics_actors.topic_identity import shard_of_name

SHARDS = 2
FILE_BYTES = 4096                 # a WAL rotation every few turns
LIMITS = SegmentLimits(max_events=5)
START_MS = 1_700_000_000_000
TOPICS = {
    "f-cap": {"durability": "fsync", "cap_records": 5},
    "f-ttl": {"durability": "fsync", "ttl_ms": 1000},
    "d-main": {"durability": "disk"},
    "d-cap": {"durability": "disk", "cap_records": 8},
    "m-main": {"durability": "memory"},
    "m-cap": {"durability": "memory", "cap_records": 6},
    "d-bcap": {"durability": "disk", "cap_bytes": 200},
    "e-main": {"durability": "ephemeral"},
    "f-del": {"durability": "fsync"},
    "d-del": {"durability": "disk"},
}
RETAINING = ("f-cap", "f-ttl", "d-cap", "m-cap", "d-bcap")


class Clock:
    def __init__(self, now: int = START_MS):
        self.now = now

    def __call__(self) -> int:
        return self.now


def records_for(model: TopicModel, rnd: int) -> list[list]:
    """The wire records of one append: data unique per topic incarnation, round and index."""
    out = []
    for k in range(1 + (rnd + len(model.name)) % 3):
        data = b'{"t":"%s","i":%d,"r":%d,"k":%d}' % (
            model.name.encode(), model.incarnation, rnd, k)
        tag = None if k == 2 else ("odd", "even")[k % 2]
        node = "n1" if rnd % 2 else None
        meta = b'{"m":%d}' % k if k == 1 else None
        out.append([data, tag, node, meta])
    return out


@dataclasses.dataclass
class Outcome:
    """What happened to the ops of a run (for the sweeps' own assertions)."""
    acked: int = 0
    failed: int = 0
    steps_failed: list = dataclasses.field(default_factory=list)
    batches_failed: int = 0       # counted by the shards (metrics): a turn of reads only
                                  # is answered even so, and its floors do not move


class Run:
    def __init__(self, data_dir: str, fs: CrashFs):
        self.data_dir, self.fs, self.clock = data_dir, fs, Clock()
        self.env = ShardEnv(data_dir, fs)
        self.shards: list[ShardHarness] = [
            self.env.shard(s, SHARDS, file_bytes=FILE_BYTES, clock=self.clock)
            for s in range(SHARDS)]
        self.cp: Checkpointer | None = None
        self.models = {name: TopicModel(name, config, shard_of_name(name, SHARDS))
                       for name, config in TOPICS.items()}
        self.in_flight: list = []
        self.step_name = ""
        self.crashed = False
        self.tolerate_errors = False          # the I/O error sweep: a failing step goes on
        self.outcome = Outcome()

    # --- processes ------------------------------------------------------------------------

    def start(self) -> None:
        self.retrying("layout", lambda: self.env.layout(SHARDS))
        for h in self.shards:
            self.start_shard(h)
        self.cp = self.retrying("compactor start", lambda: Checkpointer(
            self.fs, self.data_dir, LIMITS, clock=self.clock))

    def start_shard(self, h: ShardHarness) -> None:
        def start() -> None:
            if h.core is not None:          # a recovery that failed midway: it died
                h.crash()
            h.start()
        self.retrying(f"shard {h.shard} start", start)
        # flush_due hardens the disk tail whenever it is dirty: deterministic, no timing
        h.core.options = dataclasses.replace(h.core.options, disk_flush_interval_ms=0)

    def repair_quarantined(self, mode: str) -> None:
        """A flipped byte in the last unsynced write, with whole frames after it, looks like
        damage inside the log: recovery quarantines (docs/OPERATIONS.md 14) and an operator
        repairs, which cuts the topic where truncation at the damage would. No other power
        loss leaves such damage."""
        for h in self.shards:
            names = sorted(h.core.quarantine.topics)
            assert mode == "garble" or not names, f"quarantined after {mode}: {names}"
            for name in names:
                h.call(RepairTopic(name))

    def retrying(self, what: str, fn):
        """fn(); with `tolerate_errors`, an I/O error is noted and fn runs once more (an
        injected fault fires once: a refused start must succeed when tried again)."""
        try:
            return fn()
        except OSError as exc:
            if not self.tolerate_errors:
                raise
            self.outcome.steps_failed.append(f"{what}: {exc!r}")
            return fn()

    def die(self) -> None:
        """Every process dies now (after a CrashPoint the Fs refuses all calls)."""
        for h in self.shards:
            if h.core is not None:
                with contextlib.suppress(OSError, ValueError, BufferError):
                    h.crash()
                h.core = None
        if self.cp is not None:
            self.cp.close()
            self.cp = None

    # --- ops --------------------------------------------------------------------------------

    def turn(self, shard: int, ops: list[tuple]) -> None:
        """Submit (msg, effect) pairs in one loop turn; effect(reply, in_flight)."""
        self.in_flight = ops
        stats = self.shards[shard].core.stats
        failed_before = stats.failed_batches
        replies = self.shards[shard].batch(*[msg for msg, _ in ops])
        self.in_flight = []
        self.outcome.batches_failed += stats.failed_batches - failed_before
        for (_, effect), reply in zip(ops, replies):
            if isinstance(reply, TopicsError):
                self.outcome.failed += 1
            else:
                self.outcome.acked += 1
                effect(reply, False)
        self.harden()

    def died(self) -> None:
        """The ops of the turn the process died in are in flight."""
        for _, effect in self.in_flight:
            effect(None, True)
        self.in_flight = []

    def harden(self) -> None:
        dirty = self.fs.dirty_paths() if isinstance(self.fs, CrashFs) else set()
        for shard, h in enumerate(self.shards):
            if h.core is not None and not any(
                    p.startswith(h.core.wal.wal_dir + os.sep) for p in dirty):
                for model in self.models.values():
                    if model.shard == shard:
                        model.harden()

    def append_op(self, name: str, rnd: int) -> tuple:
        model = self.models[name]
        wire = records_for(model, rnd)
        rows = [[self.clock.now, append_envelope(d, m), t, n, m is not None]
                for d, t, n, m in wire]

        def effect(reply, in_flight: bool) -> None:
            if not in_flight:
                assert (reply["first_seq"], reply["count"]) == (model.next_seq, len(rows)), (
                    f"{name}: acked {reply} but the model expected seq {model.next_seq}")
            model.appended(rows, in_flight)
        return Append(name, wire, create=False), effect

    def put_op(self, name: str) -> tuple:
        model = self.models[name]
        return PutTopic(name, model.config), lambda reply, in_flight: model.created(
            reply and reply["config"], in_flight)

    def delete_topic_op(self, name: str) -> tuple:
        model = self.models[name]
        return DeleteTopic(name), lambda reply, in_flight: model.deleted(in_flight)

    def delete_records_op(self, name: str, before_seq: int | None = None, match=None) -> tuple:
        model = self.models[name]
        return DeleteRecords(name, before_seq, match), lambda reply, in_flight: (
            model.record_delete(before_seq, match, in_flight))

    def observe_op(self, name: str) -> tuple:
        """A diff from 0 (lazy retention runs first): the floor it shows is durable."""
        model = self.models[name]

        def effect(reply, in_flight: bool) -> None:
            if not in_flight:
                tombstone = reply["tombstone"]
                model.floor_seen = max(model.floor_seen, tombstone["gap_to"] if tombstone else 0)
        return Diff(name, 0, limit=1), effect

    # --- steps --------------------------------------------------------------------------------

    def on_shard(self, shard: int, names=None) -> list[str]:
        return [n for n in (names or TOPICS) if self.models[n].shard == shard
                and self.models[n].exists]

    def create_all(self) -> None:
        for shard in range(SHARDS):
            self.turn(shard, [self.put_op(n) for n in TOPICS if self.models[n].shard == shard])

    def round(self, rnd: int) -> None:
        """One append to every existing topic: one turn each (odd rounds) or one turn per
        shard (even rounds: a group commit)."""
        for shard in range(SHARDS):
            ops = [self.append_op(name, rnd) for name in self.on_shard(shard)]
            if rnd % 2:
                for op in ops:
                    self.turn(shard, [op])
            elif ops:
                self.turn(shard, ops)

    def observe(self) -> None:
        for shard in range(SHARDS):
            ops = [self.observe_op(name) for name in self.on_shard(shard, RETAINING)]
            if ops:
                self.turn(shard, ops)

    def checkpoint(self) -> None:
        try:
            self.env.checkpoint(self.shards, self.cp)
        except (OSError, TopicsError) as exc:
            self.outcome.steps_failed.append(f"checkpoint: {exc!r}")
        self.harden()

    def flush(self) -> None:
        for h in self.shards:
            h.core.flush_due()
        self.harden()

    def retain(self) -> None:
        for shard in range(SHARDS):
            self.turn(shard, [(Retain(), lambda reply, in_flight: None)])

    def restart(self, shard: int, crash: bool) -> None:
        h = self.shards[shard]
        try:
            h.crash() if crash else h.close()
        except OSError as exc:              # a close that cannot sync: then it dies
            if not self.tolerate_errors:
                raise
            self.outcome.steps_failed.append(f"shard {shard} close: {exc!r}")
            h.core = None
        self.start_shard(h)
        self.verify("keep", shards=[shard])

    # --- checking ---------------------------------------------------------------------------

    def read_topic(self, h: ShardHarness, name: str) -> Recovered | None:
        if name not in h.core.registry.topics:
            return None
        info = h.get(name)
        tombstone = h.call(Diff(name, 0, limit=1))["tombstone"]
        return Recovered({row[0]: row for row in h.records(name)}, info["head_seq"],
                         info["config"], tombstone["gap_to"] if tombstone else 0, tombstone)

    def verify(self, mode: str, shards=None, restarted: bool = True) -> None:
        """Check every topic of `shards` against the model, then adopt what survived."""
        for shard in shards if shards is not None else range(SHARDS):
            h = self.shards[shard]
            names = {n for n, m in self.models.items() if m.shard == shard}
            unknown = set(h.core.registry.topics) - names
            assert not unknown, f"unknown topics {unknown}"
            for name in sorted(names):
                got = self.read_topic(h, name)
                self.models[name].check(got, mode, self.clock.now, restarted)
                self.models[name].adopt(got)
        self.harden()

    def fsck(self) -> None:
        report = fsck.check(self.data_dir)
        assert report.ok, "fsck: " + "; ".join(str(p) for p in report.problems[:10])


def workload(run: Run) -> None:
    """The mixed workload; raises CrashPoint where the process dies."""
    steps = [
        ("start", run.start),
        ("create", run.create_all),
        ("round 1", lambda: run.round(1)), ("round 2", lambda: run.round(2)),
        ("checkpoint 1", run.checkpoint),
        ("round 3", lambda: run.round(3)),
        ("deletes", lambda: deletes(run)),
        ("ttl", lambda: (advance(run, 1500), run.retain(), run.observe())),
        ("flush", run.flush),
        ("round 4", lambda: run.round(4)),
        ("topic deletes", lambda: topic_deletes(run)),
        ("round 5", lambda: (run.round(5), run.observe())),
        ("checkpoint 2", run.checkpoint),
        ("restarts", lambda: (run.restart(0, crash=False), run.restart(1, crash=True))),
        ("round 6", lambda: run.round(6)), ("round 7", lambda: run.round(7)),
        ("cap delete", lambda: run.turn(run.models["d-cap"].shard,
                                        [run.delete_records_op("d-cap", before_seq=4)])),
        ("checkpoint 3", run.checkpoint),
        ("round 8", lambda: (advance(run, 300), run.round(8), run.observe())),
    ]
    for name, step in steps:
        run.step_name = name
        try:
            step()
        except (OSError, TopicsError) as exc:
            if not run.tolerate_errors:
                raise
            run.outcome.steps_failed.append(f"{name}: {exc!r}")
        run.clock.now += 7


def advance(run: Run, ms: int) -> None:
    run.clock.now += ms


def deletes(run: Run) -> None:
    ops = [run.delete_records_op("d-main", before_seq=3),
           run.delete_records_op("f-del", match="odd"),
           run.delete_records_op("m-main", match="ev*"),
           run.delete_records_op("f-cap", match=["tag", "Eq", "even"])]
    for msg, effect in ops:
        run.turn(run.models[msg.topic].shard, [(msg, effect)])


def topic_deletes(run: Run) -> None:
    for name in ("f-del", "d-del"):
        run.turn(run.models[name].shard, [run.delete_topic_op(name)])
    run.turn(run.models["f-del"].shard, [run.put_op("f-del")])


def crash_points(total: int, seed: str, sample: int) -> list[int]:
    """Every point 0..total with TOPICS_TEST_EXHAUSTIVE=1, else a seeded sample that always
    holds the first and the last."""
    if os.environ.get("TOPICS_TEST_EXHAUSTIVE") == "1":
        return list(range(total + 1))
    sample = int(os.environ.get("TOPICS_TEST_SAMPLE", sample))
    inner = random.Random(seed).sample(range(1, total), min(max(0, sample - 2), total - 1))
    return sorted({0, total, *inner})


def run_to_crash(data_dir: str, die_at: int | None, fault: tuple | None = None,
                 trace: list | None = None, tolerate_errors: bool = False) -> Run:
    """A fresh data dir, the workload until the process dies at mutating call `die_at`
    (None: never). With `fault` (FaultFs.fail arguments) that call fails instead and the
    workload goes on. `trace` collects (op, index in its class) of every mutating call.
    The returned run's processes are dead or, without a crash, alive."""
    os.makedirs(data_dir)
    fs = CrashFs(grave=data_dir + ".grave")
    fs.die_at, fs.trace = die_at, trace
    run = Run(data_dir, fs)
    run.tolerate_errors = tolerate_errors or fault is not None
    if fault is not None:
        fs.fail(*fault)
    try:
        workload(run)
    except failpoint.Abort:             # a CrashPoint of the Fs, or an armed failpoint
        run.crashed = True
        run.died()
        run.die()
    return run


def after_recovery(run: Run) -> None:
    """Recovery is complete and stable: writable at head + 1 (never a reused seq for disk
    and fsync), checkpointable, and the same after another crash."""
    run.round(90)
    failed = len(run.outcome.steps_failed)
    run.checkpoint()
    assert len(run.outcome.steps_failed) == failed, run.outcome.steps_failed[-1]
    for shard in range(len(run.shards)):
        run.restart(shard, crash=True)
    run.fsck()
    run.die()


def recover_and_check(run: Run, mode: str, where: str) -> None:
    """Power loss of kind `mode` over a dead run, recovery, the oracle, fsck, then
    after_recovery; any failure names `where`."""
    try:
        run.fs.power_loss(mode, random.Random(where))
        run.start()
        run.repair_quarantined(mode)
        run.verify(mode)
        run.fsck()
        after_recovery(run)
    except AssertionError as error:
        raise AssertionError(f"{where}: {error}") from error
    finally:
        run.die()
