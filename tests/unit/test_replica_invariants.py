"""The invariants of replication and checkpoints whose breach loses data (issue 31; the
shard core's own are in test_invariants.py), each driven to break through the pure cores
and seen to end in InvariantViolation, never in an answer.

| Invariant                                          | Where it is checked                    |
|----------------------------------------------------|----------------------------------------|
| the HW never passes an ISR member's durable end    | IsrTracker._check_covered              |
| a truncation never goes below the HW               | ReplicaCut.truncate                    |
| epochs only rise (leader, follower)                | LeaderDuties._new_tracker, append_fetched |
| a follower never applies a frame of a stale epoch  | FollowerDuties._append_fetched         |
| a checkpoint never passes what is durable          | absorption (barrier answer, absorbed)  |

Method: an IsrTracker alone, a ReplicaPair (tools/testing/replica_pair.py) of a leader and
a follower shard in one process, and a ShardHarness with a Checkpointer. The gate that
normally keeps a breach out (the ISR counted, a cut's refusal, a fetch answer's epoch
check, the barrier's fsync) is broken by hand, so what is tested is the assertion behind
it.
"""

from __future__ import annotations

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.cluster.follower_fetch import FollowerFetch
from topics_actors.cluster.isr_tracker import IsrTracker
from topics_actors.errors import InvariantViolation
from topics_actors.protocol.messages import Absorbed, Append, Checkpoint
from topics_actors.shard.replication.replica_book import ReplicaAnswer
from topics_actors.shard.replication.replica_cut import ReplicaCut

pytestmark = pytest.mark.timeout(30)

TOPIC = "t"


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), TOPIC,
                       {"min_isr": 1})
    yield pair
    pair.close()


def _write(pair: ReplicaPair, count: int) -> None:
    pair.leader.call(Append(TOPIC, [[b"%d" % i, None, None, None] for i in range(count)],
                            acks="leader"))


def _fetch_answer(pair: ReplicaPair) -> dict:
    """The leader's answer to the follower's next fetch (not applied)."""
    (_name, _endpoint, ask), = pair.follower.core.replicas.follower.requests()
    return pair.leader.call(ask)


def _apply(pair: ReplicaPair, body: dict) -> dict:
    return pair.follower.call(ReplicaAnswer(TOPIC, "replica_fetch", body))


# --- the high watermark ---------------------------------------------------------------------

class MiscountingTracker(IsrTracker):
    """A tracker that forgets in-sync followers when it counts (the bug to catch)."""

    def _counted(self) -> set[str]:
        return {self.leader}


def test_the_hw_never_passes_an_in_sync_replicas_durable_end():
    args = ("a", ("a", "b", "c"), ("a", "b", "c"), 2, 10_000, 1, 1, 1, 0)
    honest = IsrTracker(*args)
    assert honest.fetched("b", 8, 1) is False and honest.leader_committed(11) is False
    assert honest.fetched("c", 5, 2) and honest.hw_leo == 5      # the slower ISR member
    tracker = MiscountingTracker(*args)
    tracker.fetched("b", 8, 1)
    tracker.fetched("c", 5, 2)
    with pytest.raises(InvariantViolation, match=r"past the durable end of in-sync replicas "
                                                 r"\{'b': 8, 'c': 5\}"):
        tracker.leader_committed(11)
    assert tracker.hw_leo == 1                  # not moved


# --- truncation -------------------------------------------------------------------------------

def test_a_cut_never_goes_below_the_high_watermark(pair, monkeypatch):
    _write(pair, 5)
    pair.rounds()
    follower = pair.follower.core.registry.get(TOPIC)
    assert follower.head == 5 and follower.hw == 5
    pair.roles(epoch=2)                       # the follower asks where the logs part again
    epoch_end = {"leader_epoch": 2, "epoch": 1, "end_leo": 3}     # a leader that lost 3..5
    monkeypatch.setattr(ReplicaCut, "refusal", lambda *args: None)   # the gate, broken
    with pytest.raises(InvariantViolation, match="below its high watermark 5"):
        pair.follower.call(ReplicaAnswer(TOPIC, "epoch_query", epoch_end))


# --- epochs -----------------------------------------------------------------------------------

def test_a_leaders_epoch_only_rises(pair):
    pair.roles(epoch=3)
    assert pair.leader.core.registry.get(TOPIC).epochs.latest == 3
    with pytest.raises(InvariantViolation, match="leader epoch 2 .* below its latest 3"):
        pair.leader.call(pair.roles_message(epoch=2, version=9))     # newer state, older epoch


def test_a_follower_stages_epochs_only_rising(pair):
    _write(pair, 2)
    body = _fetch_answer(pair)
    assert body["first_seq"] == 1 and body["end_leo"] == 3
    body["epochs"] = [[3, 1], [2, 2]]         # a leader's answer with its epochs out of order
    with pytest.raises(InvariantViolation, match="staged out of order"):
        _apply(pair, body)


def test_a_follower_never_applies_an_answer_of_a_stale_epoch(pair, monkeypatch):
    pair.roles(epoch=2)
    pair.rounds()
    _write(pair, 2)
    body = _fetch_answer(pair)
    assert body["leader_epoch"] == 2
    assert _apply(pair, {**body, "leader_epoch": 1})["applied"] == 0     # dropped
    monkeypatch.setattr(FollowerFetch, "is_current", lambda self, answer: True)   # broken
    with pytest.raises(InvariantViolation, match="leader epoch 1 applied .* in epoch 2"):
        _apply(pair, {**body, "leader_epoch": 1})


# --- checkpoints ------------------------------------------------------------------------------

def test_a_checkpoint_never_passes_what_the_wal_holds_durably(env, shard):
    shard.put("t")                 # disk class: an append is acked unsynced (the first
    shard.append("t")              # syncs its head reservation)
    shard.append("t")
    writer = shard.core.wal.writer
    assert writer.dirty and writer.durable_end < (writer.idx, writer.tail)
    checkpointer = env.checkpointer()
    try:                                       # as if a barrier had been answered unsynced
        snap_id = checkpointer.checkpoint({shard.core.wal.group_key: (writer.idx, writer.tail)})
    finally:
        checkpointer.close()
    with pytest.raises(InvariantViolation, match=f"snapshot {snap_id} checkpoints WAL "
                                                 f"position .* past the shard's durable end"):
        shard.call(Absorbed(snap_id))


def test_a_checkpoint_barrier_is_answered_only_once_durable(shard, monkeypatch):
    shard.put("t")
    assert shard.call(Checkpoint())["offset"] == shard.core.wal.writer.durable_end[1]
    monkeypatch.setattr(shard.core.wal.writer, "sync", lambda: None)   # a sync left out
    with pytest.raises(InvariantViolation, match="a checkpoint barrier answered at"):
        shard.call(Checkpoint())
