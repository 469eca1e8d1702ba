"""A write staged on a leader in the batch whose roles take its leadership away (a move's
handoff, docs/CLUSTER.md 8): its reply waits for the high watermark (`acks: all`, and every
ack mode while a move takes the copy away), which no follower will raise any more, so it
is answered in doubt (not_leader, `in_doubt`: the client resends it with its key to the
new leader), never as acknowledged. The write lost in the heavy move test was one such:
its copy was dropped in the same batch, and the reply went out as acked, on the old
leader's copy alone. Two shards of two nodes in one process (tools/testing/replica_pair.py).
"""

import dataclasses

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from tools.testing.shard_harness import rec
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Append, DeleteRecords
from topics_actors.shard.replication.replica_book import ReplicaAnswer

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs",
                       {"durability": "disk"})
    pair.rounds()                                  # the follower settled, in the ISR
    yield pair
    pair.close()


def write(acks: str = "all") -> Append:
    return Append("logs", [list(rec())], acks=acks)


def assert_in_doubt(reply) -> None:
    assert isinstance(reply, TopicsError), f"answered as acknowledged: {reply}"
    assert reply.code == ErrorCode.NOT_LEADER and reply.detail["in_doubt"], reply.detail
    assert reply.detail["leader"] == "b", reply.detail


def test_a_write_in_the_batch_that_moves_the_copy_off_is_answered_in_doubt(pair):
    moved_off = pair.roles_message(leader="b", epoch=2, isr=("b", "c"), replicas=["b", "c"])
    replies = pair.leader.turn(write(), moved_off)
    assert replies[2] == {"roles": 1} and not pair.leader.exists("logs")   # copy dropped
    assert_in_doubt(replies[1])


def test_a_write_in_the_batch_that_hands_leadership_over_is_answered_in_doubt(pair):
    handed = pair.roles_message(leader="b", epoch=2)          # `a` stays, as a follower
    replies = pair.leader.turn(write(), handed)
    assert replies[2] == {"roles": 1} and pair.leader.exists("logs")
    assert_in_doubt(replies[1])


def test_a_leader_write_held_by_a_move_that_takes_the_copy_is_answered_in_doubt(pair):
    leaving = pair.roles_message(leader="a", epoch=1, replicas=["a", "b"], target=["b"])
    pair.leader.call(leaving)                 # `acks: leader` now waits for the ISR too
    moved_off = pair.roles_message(leader="b", epoch=2, isr=("b",), replicas=["b"])
    replies = pair.leader.turn(write("leader"), moved_off)
    assert_in_doubt(replies[1])



def test_a_delete_in_the_batch_that_moves_the_copy_off_is_answered_in_doubt(pair):
    """A replicated delete waits for its op to commit over the ISR: staged in the batch that
    ends the leadership, it is answered in doubt at once, not left waiting for good."""
    pair.leader.append("logs", rec(), acks="leader")
    moved_off = pair.roles_message(leader="b", epoch=2, isr=("b", "c"), replicas=["b", "c"])
    replies = pair.leader.turn(DeleteRecords("logs", before_seq=2), moved_off)
    assert replies[2] == {"roles": 1}
    assert 1 in replies, "the delete's reply waits for good"
    assert_in_doubt(replies[1])


def test_a_new_leader_taking_its_last_fetch_and_its_role_in_one_batch_keeps_the_records(
        pair):
    """The heir's last fetch answer and the roles that make it the leader commit in one
    batch: the fetched records are published (its head has not moved when the new epoch's
    reservation is settled), the epoch starts after them, and its first write comes after
    the padded reservation."""
    for _ in range(3):
        pair.leader.append("logs", rec(), acks="leader")
    (name, _endpoint, ask), = pair.follower.core.replicas.follower.requests()
    answer = ReplicaAnswer(name, ask.KIND, pair.leader.call(dataclasses.replace(ask,
                                                                             wait_ms=0)))
    replies = pair.follower.turn(answer, pair.roles_message(leader="b", epoch=2))
    assert replies[2] == {"roles": 1}, replies
    topic = pair.follower.core.registry.get("logs")
    padded = topic.head
    assert padded > 3 and all(topic.loc(seq) for seq in (1, 2, 3))
    assert topic.epochs.entries()[-1] == (2, 4)
    assert pair.follower.append("logs", rec(), acks="leader")["first_seq"] == padded + 1
