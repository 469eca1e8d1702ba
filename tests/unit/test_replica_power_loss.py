"""Power loss on every replica at once (spec/replication.md D8): two shards of two nodes in
one process (tools/testing/replica_pair.py), each on its own CrashFs (a machine that loses
what it did not sync). What the high watermark covered, which is what `acks: all` answers,
is on both copies after the power comes back, whichever node then leads; the copies end
identical; what only the old leader had is either kept by it (it leads again) or dropped
from it (the other node leads, and its log never had it)."""

import dataclasses
import os
import random

import pytest

from topics_actors.errors import ErrorCode, TopicsError

from tools.testing.crash_fs import CrashFs
from tools.testing.replica_pair import FOLLOWER, LEADER, ReplicaPair, pair_env

pytestmark = pytest.mark.timeout(60)


def _crash_env(root, name: str):
    return pair_env(root, name, CrashFs(grave=os.path.join(str(root), name + ".grave")))


def _copy(harness, name: str = "t") -> dict[int, bytes]:
    core = harness.core
    topic = core.registry.get(name)
    return {seq: rec.envelope for seq in range(topic.earliest_seq(), topic.head + 1)
            if (rec := core.reader.read(topic, seq)) is not None}


def _write(pair, first: int, count: int) -> None:
    pair.leader.append("t", *[[b'{"n":%d}' % n, None, None, None]
                              for n in range(first, first + count)], acks="leader")


def _pair(tmp_path, durability: str) -> ReplicaPair:
    return ReplicaPair(_crash_env(tmp_path, "a"), _crash_env(tmp_path, "b"), "t",
                       {"durability": durability})


def _fetched(pair, first: int, end: int) -> int:
    """Records first..end-1 written in runs of 50, each fetched; the watermark then."""
    for start in range(first, end, 50):
        _write(pair, start, 50)
        pair.rounds(2)
    return pair.leader.core.registry.get("t").hw


def _power_loss(pair, seed: int) -> None:
    """Both nodes lose what they did not sync, and start again."""
    rng = random.Random(seed)
    for harness in (pair.leader, pair.follower):
        harness.crash()
        harness.fs.power_loss("drop", rng)
        harness.start()


@pytest.mark.parametrize("new_leader", [LEADER, FOLLOWER])
def test_what_the_watermark_covered_survives_power_loss_on_every_replica(tmp_path,
                                                                          new_leader):
    pair = _pair(tmp_path, "fsync")
    try:
        _fetched(pair, 0, 300)
        _write(pair, 300, 20)                       # the leader's alone: not fetched yet
        hw = pair.leader.core.registry.get("t").hw
        acked = {seq: body for seq, body in _copy(pair.leader).items() if seq <= hw}
        assert hw == 300 and len(acked) == 300
        _power_loss(pair, 7)
        pair.roles(leader=new_leader, epoch=2)
        if new_leader == FOLLOWER:                   # the node that followed leads now
            pair.leader, pair.follower = pair.follower, pair.leader
            _write(pair, 1000, 5)                    # seqs 301..305: others than a's
        pair.rounds(6)
        leader, follower = _copy(pair.leader), _copy(pair.follower)
        assert leader == follower
        assert all(leader.get(seq) == body for seq, body in acked.items())
        assert len(leader) == (320 if new_leader == LEADER else 305)
    finally:
        pair.close()


# --- the disk class (issue 34): reservations on every copy, an epoch past the lost tail -----

def _seqs_of(copy: dict[int, bytes]) -> dict[int, int]:
    import orjson
    return {seq: orjson.loads(envelope)["d"]["n"] for seq, envelope in copy.items()}


@pytest.mark.parametrize("new_leader", [LEADER, FOLLOWER])
def test_a_disk_topic_never_issues_a_seq_again_after_power_loss_on_every_replica(
        tmp_path, new_leader):
    """Both copies lose what they did not sync. Whichever leads next, in a new epoch, its
    head starts past every seq its copy reserved, so no seq the old leader handed out (and
    the watermark covered: acked) is given to another record; the copies end identical.
    Before the fix a follower took no reservations (it led at the seq its sync had reached
    and issued the lost seqs again), and a leader padded its head over its lost tail in the
    old epoch while its follower kept records there."""
    pair = _pair(tmp_path, "disk")
    try:
        hw = _fetched(pair, 1, 601)
        assert hw == 600
        _power_loss(pair, 11)
        pair.roles(leader=new_leader, epoch=2)
        if new_leader == FOLLOWER:
            pair.leader, pair.follower = pair.follower, pair.leader
        _write(pair, 5000, 5)
        pair.rounds(6)
        leader, follower = _copy(pair.leader), _copy(pair.follower)
        assert leader == follower
        numbers = _seqs_of(leader)
        assert sorted(n for n in numbers.values() if n >= 5000) == list(range(5000, 5005))
        assert min(s for s, n in numbers.items() if n >= 5000) > hw, "a seq issued again"
        assert all(numbers[s] == s for s in numbers if s <= hw), "an acked seq holds another"
    finally:
        pair.close()


def _leader_back(tmp_path, durability: str) -> ReplicaPair:
    """A pair whose leader wrote 10 records, crashed and started again."""
    pair = _pair(tmp_path, durability)
    _write(pair, 1, 10)
    pair.rounds(2)
    pair.leader.crash()
    pair.leader.start()
    return pair


def test_a_copy_does_not_lead_in_the_epoch_it_recovered_in(tmp_path):
    """A leader back after a crash, told it still leads in the same epoch, waits for a new
    one (not_ready): its log may lack records its follower holds of that epoch."""
    pair = _leader_back(tmp_path, "fsync")
    try:
        assert pair.leader.core.unsettled() == {"t": 1}
        pair.roles(leader=LEADER, epoch=1)
        with pytest.raises(TopicsError) as refused:
            _write(pair, 100, 1)
        assert refused.value.code is ErrorCode.NOT_READY
        pair.roles(leader=LEADER, epoch=2)
        _write(pair, 100, 1)
        assert pair.leader.core.unsettled() == {}
    finally:
        pair.close()


def test_a_shard_its_supervisor_restarted_leads_again_in_the_same_epoch(tmp_path):
    """Only the shard's process crashed (the supervisor restarted it, `settled`): nothing
    it wrote was lost, so it leads on in its epoch, with no new election (D8 26)."""
    pair = _leader_back(tmp_path, "disk")
    try:
        message = pair.roles_message(LEADER, 1)
        pair.leader.call(dataclasses.replace(message, settled=[0]))
        assert pair.leader.core.unsettled() == {}
        _write(pair, 100, 1)
        pair.rounds(2)
        assert _copy(pair.leader) == _copy(pair.follower)
    finally:
        pair.close()
