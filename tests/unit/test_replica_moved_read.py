"""A read on the node whose copy a move takes away (docs/CLUSTER.md 8): its copy is dropped
when the roles no longer name it, and a read answered after that, parked there before
(a long poll) or staged in the same batch as the roles, is sent to the topic's leader
(not_leader naming it) instead of refused topic_not_found: the topic lives on in the
cluster. A read of a topic deleted meanwhile is still topic_not_found. Two shards of two
nodes in one process (tools/testing/replica_pair.py)."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Diff

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs", {})
    yield pair
    pair.close()


def moved_off_a(pair):
    """The move's last step: `b` leads (a new epoch), `a` is no replica any more."""
    return pair.roles_message(leader="b", epoch=2, isr=("b", "c"), replicas=["b", "c"])


def test_a_read_parked_on_a_copy_a_move_drops_is_sent_to_the_leader(pair):
    assert pair.leader.turn(Diff("logs", 0, wait_ms=10_000)) == {}        # parked, caught up
    replies = pair.leader.turn(moved_off_a(pair), first=2)
    assert replies[2] == {"roles": 1} and not pair.leader.exists("logs")  # the copy dropped
    error = replies[1]
    assert isinstance(error, TopicsError) and error.code == ErrorCode.NOT_LEADER, error
    assert error.detail["leader"] == "b"


def test_a_read_in_the_batch_that_drops_the_copy_is_sent_to_the_leader(pair):
    replies = pair.leader.turn(Diff("logs", 0), moved_off_a(pair))
    assert replies[2] == {"roles": 1} and not pair.leader.exists("logs")
    assert isinstance(replies[1], TopicsError), replies[1]
    assert replies[1].code == ErrorCode.NOT_LEADER and replies[1].detail["leader"] == "b"


def test_a_read_parked_on_a_topic_deleted_meanwhile_is_topic_not_found(pair):
    assert pair.leader.turn(Diff("logs", 0, wait_ms=10_000)) == {}
    tombstone = pair.roles_message(leader=None, epoch=2, version=2, deleted=True)
    error = pair.leader.turn(tombstone, first=2)[1]
    assert isinstance(error, TopicsError) and error.code == ErrorCode.TOPIC_NOT_FOUND
