"""A new leader and its predecessor's ops (shard/replication/leader_duties.py): ops it
fetched but had not yet learned were committed (a delete the old leader applied and
answered) are applied before it serves a read (503 predecessor_ops until then), and when
it leads alone in the ISR they commit at once, as its records do, instead of waiting for
a follower's fetch that never comes. Method: a leader and a follower shard of two nodes
in one process (tools/testing/replica_pair.py)."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.protocol.messages import DeleteRecords, Diff

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), TOPIC,
                       {"durability": "fsync"})
    yield pair
    pair.close()


def test_a_new_leader_alone_in_the_isr_applies_its_predecessors_delete_and_serves(pair):
    pair.leader.append(TOPIC, *[[b'{"n":%d}' % n, "pii" if n % 2 else "ok"]
                                for n in range(6)], acks="leader")
    pair.rounds(3)
    pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match="pii"), 0)
    pair.leader.core.commit()
    pair.round()                   # b holds the op, not yet that it is committed
    pending = pair.follower.core.registry.get(TOPIC).ops.pending
    assert [op.epoch for op in pending] == [1]
    new = pair.roles_message(leader="b", epoch=2, isr=("b",))
    pair.follower.turn(new)        # a died: b leads alone (and applies, with no reply)
    assert not pair.follower.core.registry.get(TOPIC).ops.pending
    reply = pair.follower.call(Diff(TOPIC, 0, limit=100, include_tags=True))
    assert [r[3] for r in reply["records"]] == ["ok", "ok", "ok"]
