"""A diverged follower copy cut back in place (docs/CLUSTER.md, "When a copy diverged";
ledger/log_truncation.py, shard/replication/replica_cut.py, the Truncate frame of
docs/DURABILITY.md).

| ID    | What                                                        | Expected                  |
|-------|-------------------------------------------------------------|---------------------------|
| TR-1  | cut on a TopicState, then restore                           | restore gives it all back |
| TR-2  | follower diverges, epoch answer, leader's records re-fetched | cut in place, seqs reused |
| TR-3  | crash after TR-2, replay the WAL (Truncate frame, same seqs) | recovered == live         |
| TR-4  | checkpoint over divergent records, Truncate and re-writes    | segments hold the leader's|
| TR-5  | the records to drop are absorbed into segments               | whole-copy reset          |
| TR-6  | a checkpoint barrier staged, not yet taken in                | whole-copy reset          |
| TR-7  | a barrier in the WAL past the snapshot a recovery loaded     | whole-copy reset          |
| TR-8  | the batch holding the cut fails                              | copy back as it was       |
| TR-9  | fsck's audit ledger (no reader) meets the frame              | head back, re-writes taken|
| TR-10 | random failovers, checkpoints and restarts                   | copy == the leader's log  |

Method: a ShardHarness (tools/testing/shard_harness.py) whose core has a node id, driven as
a follower the way its shell would: ReplicaRoles from the "supervisor", ReplicaAnswer
fetch and epoch answers from the "leader", with no socket. Records are read through the
core's RecordReader (a follower refuses reads: they go to the leader).
"""

from __future__ import annotations

import random
import time

import pytest

from topics_actors import fsck
from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.config import ShardOptions
from topics_actors.ledger import log_truncation
from topics_actors.ledger.dedupe_index import DedupeEntry
from topics_actors.ledger.queue_state import queue_of
from topics_actors.ledger.topic_ledger import TopicLedger
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import Checkpoint
from topics_actors.record_envelope import build, payload_bytes
from topics_actors.shard.replication import replica_report
from topics_actors.shard.batch_stager import roll_back
from topics_actors.shard.replication.replica_book import ReplicaAnswer
from topics_actors.shard.replication.replica_records import epochs_in
from topics_actors.shard.shard_core import ShardCore
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_config import TopicConfig
from tools.testing.shard_harness import ShardHarness

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"
CONFIG = {"replication_factor": 3, "min_isr": 2}
NODES = ["n1", "n2", "n3"]


class FollowerHarness(ShardHarness):
    """A harness whose shard belongs to node n2 of a cluster."""

    def start(self) -> "FollowerHarness":
        options = ShardOptions(self.data_dir, self.shard, self.count,
                               wal_file_bytes=self.file_bytes, background_prealloc=False,
                               node_id="n2")
        self.core = ShardCore(self.fs, options)
        self.replay = self.core.replay()
        self.progress = list(self.replay.run())
        self.core.audit_segments(None)
        self.core.ready = True
        return self

    def roles(self, epoch: int, leader: str) -> dict:
        return self.call(ReplicaRoles([{
            "topic": TOPIC, "leader": leader, "leader_epoch": epoch, "isr": NODES,
            "replicas": NODES, "version": epoch, "config": CONFIG,
            "leader_shards": ["tcp://127.0.0.1:1"]}], complete=True))

    def fetched(self, epoch: int, first: int, datas: list[bytes], epochs: list, hw: int,
                end_leo: int | None = None):
        """A fetch answer of records from `first` on (seqs up to `end_leo` without a
        record are holes)."""
        records = [[first + i, 1_000 + first + i, build(d, None), None, None, 0]
                   for i, d in enumerate(datas)]
        return self.call(ReplicaAnswer(TOPIC, "replica_fetch", {
            "leader_epoch": epoch, "first_seq": first, "records": records,
            "epochs": epochs, "hw": hw, "end_leo": end_leo or first + len(datas),
            "ops_hw": 0}))

    def epoch_answer(self, epoch: int, answered: int, end_leo: int) -> dict:
        reply = self.call(ReplicaAnswer(TOPIC, "epoch_query", {
            "leader_epoch": epoch, "epoch": answered, "end_leo": end_leo}))
        reply.pop("performance", None)
        return reply

    def topic(self) -> TopicState:
        return self.core.registry.get(TOPIC)

    def copy(self) -> list:
        topic = self.topic()
        out = []
        for seq in range(1, topic.head + 1):
            rec = self.core.reader.read(topic, seq)
            out.append(None if rec is None else (rec.seq, bytes(rec.envelope)))
        return out

    def state(self) -> dict:
        t = self.topic()
        return {"head": t.head, "count": t.count, "bytes": t.bytes, "next_seq": t.next_seq,
                "epochs": t.epochs.entries(), "copy": self.copy()}

    def figures(self) -> dict:
        return replica_report.figures(self.core.replicas)["replication"]


def old(i: int) -> bytes:
    return b'{"old":%d}' % i


def new(i: int) -> bytes:
    return b'{"new":%d,"pad":"%s"}' % (i, b"y" * i)


@pytest.fixture
def follower(env):
    env.layout(1)
    harness = FollowerHarness(env.data_dir, env.fs).start()
    yield harness
    if harness.core is not None:
        harness.crash()


def diverge(h: FollowerHarness) -> None:
    """Seqs 1..10 of epoch 1 from n1 (hw 6); n1 dies, n3 leads epoch 2 with epoch 1 only
    up to seq 7."""
    h.roles(1, "n1")
    h.fetched(1, 1, [old(i) for i in range(1, 11)], [[1, 1]], hw=6)
    assert h.topic().head == 10 and h.topic().hw == 6
    h.roles(2, "n3")


def heal(h: FollowerHarness, hw: int = 12) -> dict:
    """The epoch answer (epoch 1 ended at leo 8 on n3), then n3's records 8..12."""
    reply = h.epoch_answer(2, 1, 8)
    h.fetched(2, 8, [new(i) for i in range(8, 13)], [[1, 1], [2, 8]], hw=hw)
    return reply


def expected() -> list:
    return ([(i, build(old(i), None)) for i in range(1, 8)]
            + [(i, build(new(i), None)) for i in range(8, 13)])


def wal_frames(h) -> list:
    out = []
    for _idx, path in h.wal_files():
        scan = FileScan(h.fs, path)
        out += [(f.type, f.seq) for f in scan.frames()]
        scan.close()
    return out


# --- TR-1: the cut itself -------------------------------------------------------------------

def test_cut_then_restore_gives_the_topic_back():
    topic = TopicState("t", TopicConfig())
    topic.epochs = EpochCache([(1, 1), (2, 5), (3, 9)])
    topic.publish(1, list(range(101, 113)), 12 * 10, 7)
    topic.dedupe.add("low", DedupeEntry(1, 2, 2, 5), 60_000)
    topic.dedupe.add("high", DedupeEntry(9, 11, 11, 5), 60_000)
    topic.dedupe.add("sess:1:a", DedupeEntry(10, 10, 10, 5), 60_000)
    topic.dedupe.add("~s:4", DedupeEntry(3, 5, 0, 5), 60_000)   # a session's: kept
    topic.dedupe.add("~s:9", DedupeEntry(8, 8, 0, 5), 60_000)   # dropped
    topic.trims = [[2, 3], [8, 11]]
    topic.reserved_head = 15                                  # an old leader's reservation
    before = {name: _plain(getattr(topic, name)) for name in TopicState.__slots__}

    def read(t, seq):
        return None if seq == 10 else type("R", (), {"envelope": b"x" * 22, "flags": 0})()
    dropped = log_truncation.cut(topic, 7, read, undoable=True)
    assert (topic.head, topic.next_seq, topic.reserved_head) == (7, 8, 7)
    assert list(topic.locs) == list(range(101, 108))
    assert dropped.records == 4 and topic.count == 8          # seq 10 was a hole
    assert topic.epochs.entries() == [(1, 1), (2, 5)]
    assert [key for key, _ in topic.dedupe.items()] == ["low", "~s:4"]
    assert topic.trims == [[2, 3]]
    log_truncation.restore(topic, dropped)
    after = {name: _plain(getattr(topic, name)) for name in TopicState.__slots__}
    assert after == before


def _plain(value):
    if isinstance(value, EpochCache):
        return value.entries()
    if hasattr(value, "user"):
        return sorted(value.items())
    return list(value) if hasattr(value, "tobytes") else value


def test_cut_forgets_the_lease_state_of_dropped_jobs_only():
    topic = TopicState("q", TopicConfig())
    topic.publish(1, [1] * 10, 10, 1)
    queue = queue_of(topic)
    for seq in (3, 9):
        queue.lease(seq, "node", 5_000)
    queue.release(4, 9_000)
    queue.release(8, 9_000)
    queue.cursor = 11
    before = queue.to_entry(True, lambda seq: True)
    dropped = log_truncation.cut(topic, 7, None, undoable=True)
    assert sorted(queue.leases) == [3] and sorted(queue.delayed) == [4]
    assert sorted(queue.deliveries) == [3] and queue.cursor == 8
    log_truncation.restore(topic, dropped)
    assert topic.queue.to_entry(True, lambda seq: True) == before


def test_refusals_name_what_stands_in_the_way():
    topic = TopicState("t", TopicConfig())
    topic.publish(1, [1] * 10, 10, 1)
    topic.hw = 4
    assert log_truncation.refusal(topic, 5) is None
    assert log_truncation.refusal(topic, 3) == "below_hw"
    topic.absorbed = 6
    assert log_truncation.refusal(topic, 5) == "absorbed"
    topic.absorbed, topic.evict_floor = 0, 6
    assert log_truncation.refusal(topic, 5) == "below_floors"
    topic.evict_floor, topic.next_seq = 0, 12
    assert log_truncation.refusal(topic, 5) == "staged"


# --- TR-2, TR-3: live cut and its replay -----------------------------------------------------

def test_diverged_copy_is_cut_in_place_and_fetches_on(follower):
    diverge(follower)
    reply = heal(follower)
    assert reply == {"truncated": 3, "last": 7}
    figures = follower.figures()
    assert (figures["copies_truncated"], figures["copies_reset"]) == (1, 0)
    state = follower.state()
    assert state["copy"] == expected()
    assert state["head"] == 12 and state["count"] == 12
    assert state["bytes"] == sum(payload_bytes(len(e), 0) for _s, e in expected())
    assert state["epochs"] == [(1, 1), (2, 8)]
    assert (FrameType.TRUNCATE, 7) in wal_frames(follower)
    assert follower.core.replicas.replicas.follow(TOPIC).fetch.next_request().fetch_leo == 13


def test_replay_of_a_truncate_frame_then_rewritten_seqs_equals_the_live_state(follower):
    diverge(follower)
    heal(follower)
    live = follower.state()
    follower.restart(crash=True)
    assert follower.state() == live
    follower.restart(crash=False)
    assert follower.state() == live


def test_a_second_truncation_after_more_failovers(follower):
    diverge(follower)
    heal(follower, hw=10)
    follower.roles(3, "n1")        # n1 is back as leader of epoch 3 with epoch 2 up to 10
    assert follower.epoch_answer(3, 2, 11)["truncated"] == 2
    follower.fetched(3, 11, [b'{"third":%d}' % i for i in (11, 12)],
                     [[2, 8], [3, 11]], hw=12)
    live = follower.state()
    assert live["epochs"] == [(1, 1), (2, 8), (3, 11)] and live["head"] == 12
    assert follower.figures()["copies_truncated"] == 2
    follower.restart(crash=True)
    assert follower.state() == live


# --- TR-4: the compactor meets the frame ------------------------------------------------------

@pytest.mark.parametrize("max_events", [4, 7, 100])
def test_checkpoint_over_the_cut_keeps_the_leaders_records(env, follower, max_events):
    diverge(follower)
    heal(follower)
    live = follower.state()
    checkpointer = env.checkpointer(max_events=max_events)
    try:
        env.checkpoint([follower], checkpointer)
        assert follower.topic().absorbed == 12
        assert follower.state() == live                  # now read from segments
        assert fsck.check(env.data_dir).problems == []
        follower.restart(crash=True)                      # snapshot, nothing to replay
        assert follower.state() == live
        follower.roles(2, "n3")
        assert follower.epoch_answer(2, 2, 13) == {"applied": 0}     # nothing to cut
        follower.fetched(2, 13, [new(13)], [[2, 8]], hw=13)
        env.checkpoint([follower], checkpointer)
        follower.restart(crash=False)
        assert follower.state()["copy"] == expected() + [(13, build(new(13), None))]
    finally:
        checkpointer.close()


def test_cut_taken_in_by_a_checkpoint_with_older_segments(env, follower):
    checkpointer = env.checkpointer(max_events=3)
    try:
        follower.roles(1, "n1")
        follower.fetched(1, 1, [old(i) for i in range(1, 6)], [[1, 1]], hw=5)
        env.checkpoint([follower], checkpointer)          # seqs 1..5 absorbed
        follower.fetched(1, 6, [old(i) for i in range(6, 11)], [[1, 1]], hw=6)
        follower.roles(2, "n3")
        heal(follower)
        assert follower.figures()["copies_truncated"] == 1
        live = follower.state()
        env.checkpoint([follower], checkpointer)
        assert follower.state() == live
        follower.restart(crash=True)
        assert follower.state() == live
    finally:
        checkpointer.close()


def test_a_suffix_of_holes_is_cut_and_the_open_segment_goes_on(env, follower):
    follower.roles(1, "n1")
    follower.fetched(1, 1, [old(i) for i in range(1, 8)], [[1, 1]], hw=6, end_leo=11)
    assert follower.topic().head == 10                    # 8..10: holes
    follower.roles(2, "n3")
    assert heal(follower) == {"truncated": 0, "last": 7}
    live = follower.state()
    assert live["copy"] == expected()
    checkpointer = env.checkpointer(max_events=100)
    try:
        env.checkpoint([follower], checkpointer)          # one open segment, 1..12
        assert follower.topic().seg_firsts == [1] and follower.topic().seg_counts == [12]
        follower.restart(crash=True)
        assert follower.state() == live
    finally:
        checkpointer.close()


# --- TR-5..TR-8: when the copy is reset whole instead ----------------------------------------

def test_absorbed_suffix_falls_back_to_the_whole_copy_reset(env, follower):
    diverge(follower)
    env.checkpoint([follower])                            # seqs 1..10 in segments
    assert heal(follower) == {"reset": True}
    figures = follower.figures()
    assert (figures["copies_truncated"], figures["copies_reset"]) == (0, 1)
    assert follower.core.replicas.cut.refused == {"absorbed": 1}
    assert follower.topic().head == 0                     # fetches everything again
    assert follower.core.replicas.replicas.follow(TOPIC).fetch.next_request().fetch_leo == 1


def test_open_checkpoint_falls_back_to_the_whole_copy_reset(follower):
    diverge(follower)
    follower.call(Checkpoint())                           # barrier, no absorbed yet
    assert heal(follower) == {"reset": True}
    assert follower.core.replicas.cut.refused == {"checkpoint_open": 1}


def test_barrier_found_by_the_recovery_keeps_the_window_open(follower):
    diverge(follower)
    follower.call(Checkpoint())
    follower.restart(crash=True)           # its checkpoint may still be running
    follower.roles(2, "n3")
    assert follower.core.checkpoints.open
    assert heal(follower) == {"reset": True}


def test_failed_batch_puts_the_copy_back_and_asks_again(follower):
    diverge(follower)
    before = follower.state()
    core = follower.core
    core.submit(b"peer", 1, ReplicaAnswer(TOPIC, "epoch_query", {
        "leader_epoch": 2, "epoch": 1, "end_leo": 8}), time.perf_counter_ns())
    assert follower.topic().head == 7                     # cut while staged
    roll_back(core.stager.take(), core.registry)          # what a failed commit does
    core.replicas.follower.failed()
    assert follower.state() == before
    ask = core.replicas.replicas.follow(TOPIC).fetch.next_request()
    assert type(ask).__name__ == "EpochQuery" and ask.asked_epoch == 1
    heal(follower)
    assert follower.state()["copy"] == expected()


# --- TR-9: fsck's ledger ------------------------------------------------------------------------

def test_audit_ledger_applies_the_frame(follower):
    diverge(follower)
    heal(follower)
    ledger = TopicLedger(0)
    for _idx, path in follower.wal_files():
        with open(path, "rb") as handle:
            data = handle.read()
        offset, ended = 0, False
        while not ended:
            offset, ended = ledger.scan(data, offset, len(data), 1000)
    topic = next(iter(ledger.by_tid.values()))
    assert topic.head == 12 and topic.epochs.entries() == [(1, 1), (2, 8)]
    assert ledger.ignored.get("append_out_of_order", 0) == 0
    report = fsck.check(follower.data_dir)
    assert report.problems == [] and report.frames_by_type["TRUNCATE"] == 1


# --- TR-10: random failover histories -----------------------------------------------------------

class Leader:
    """The leader of the moment as a model: its log ((epoch, data) per seq) and epoch cache,
    answering the follower the way shard/replication/replica_book.py would."""

    def __init__(self):
        self.log: list[tuple[int, bytes]] = []
        self.cache = EpochCache()
        self.epoch = 0

    def fail_over(self, kept: int) -> None:
        """A new leader that held only the first `kept` records."""
        self.log = self.log[:kept]
        self.cache.truncate_to(kept + 1)
        self.epoch += 1
        self.cache.assign(self.epoch, kept + 1)

    def write(self, n: int) -> None:
        self.log += [(self.epoch, b'{"e":%d,"i":%d}' % (self.epoch, len(self.log) + i))
                     for i in range(1, n + 1)]

    def serve(self, h: FollowerHarness, hw: int) -> None:
        """Answer the follower's requests until it has the whole log."""
        for _ in range(50):
            ask = h.core.replicas.replicas.follow(TOPIC).fetch.next_request()
            leo = len(self.log) + 1
            if type(ask).__name__ == "EpochQuery":
                end = self.cache.end_for(ask.asked_epoch, leo)
                h.epoch_answer(self.epoch, end.epoch, end.end_leo)
            elif ask.fetch_leo == leo:
                return
            else:
                first = ask.fetch_leo
                datas = [data for _e, data in self.log[first - 1:]]
                h.fetched(self.epoch, first, datas, epochs_in(self.cache, first, leo), hw)
        raise AssertionError("the follower never caught up")


@pytest.mark.parametrize("seed", range(30))
def test_random_failovers_keep_the_copy_equal_to_the_leaders(env, follower, seed):
    rnd = random.Random(seed)
    leader, hw, cuts, counted = Leader(), 0, 0, 0

    def healed() -> int:               # the copies cut or reset (the counters are a process's)
        figures = follower.figures()
        return figures["copies_truncated"] + figures["copies_reset"]
    for _round in range(6):
        kept = rnd.randint(hw, len(leader.log))        # a new leader has everything <= hw
        cuts += kept < len(leader.log)
        leader.fail_over(kept)
        follower.roles(leader.epoch, "n1" if leader.epoch % 2 else "n3")
        leader.serve(follower, hw)
        leader.write(rnd.randint(0, 8))
        hw = rnd.randint(hw, len(leader.log))
        leader.serve(follower, hw)
        assert follower.copy() == [(s, build(d, None)) for s, (_e, d) in
                                   enumerate(leader.log, 1)]
        event = rnd.random()
        if event < 0.25:
            checkpointer = env.checkpointer(max_events=rnd.choice([2, 3, 5, 10_000]))
            try:
                env.checkpoint([follower], checkpointer)
            finally:
                checkpointer.close()
        elif event < 0.5:
            live, counted = follower.state(), counted + healed()
            follower.restart(crash=rnd.random() < 0.5)
            assert follower.state() == live
    assert counted + healed() == cuts
    live = follower.state()
    follower.restart(crash=True)
    assert follower.state() == live
