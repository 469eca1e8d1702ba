"""Power loss on every replica at once (spec/replication.md D8): two shards of two nodes in
one process (tools/testing/replica_pair.py), each on its own CrashFs (a machine that loses
what it did not sync). What the high watermark covered, which is what `acks: all` answers,
is on both copies after the power comes back, whichever node then leads; the copies end
identical; what only the old leader had is either kept by it (it leads again) or dropped
from it (the other node leads, and its log never had it)."""

import os
import random

import pytest

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


@pytest.mark.parametrize("new_leader", [LEADER, FOLLOWER])
def test_what_the_watermark_covered_survives_power_loss_on_every_replica(tmp_path,
                                                                          new_leader):
    pair = ReplicaPair(_crash_env(tmp_path, "a"), _crash_env(tmp_path, "b"), "t",
                       {"durability": "fsync"})
    try:
        for first in range(0, 300, 50):
            _write(pair, first, 50)
            pair.rounds(2)
        _write(pair, 300, 20)                       # the leader's alone: not fetched yet
        hw = pair.leader.core.registry.get("t").hw
        acked = {seq: body for seq, body in _copy(pair.leader).items() if seq <= hw}
        assert hw == 300 and len(acked) == 300
        rng = random.Random(7)
        for harness in (pair.leader, pair.follower):
            harness.crash()
            harness.fs.power_loss("drop", rng)
            harness.start()
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
