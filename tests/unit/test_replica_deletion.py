"""Deleting a placed topic (docs/CLUSTER.md 10): the leader's delete_topic waits while the
supervisor turns the topic's cluster state into a tombstone (topic_change), and every copy
drops the topic when its roles carry the tombstone, again after a restart if a crash came
first. A copy that missed the deletion is dropped when the name's new topic arrives: its
epochs start before the new topic's first epoch. Two shards of two nodes in one process
(tools/testing/replica_pair.py)."""


import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import DeleteTopic

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs",
                       {"durability": "disk"})
    pair.leader.append("logs", *[[b"%d" % n] for n in range(5)], acks="leader")
    pair.rounds()
    assert pair.follower.core.registry.get("logs").head == 5
    yield pair
    pair.close()


def test_a_delete_waits_for_the_tombstone_and_every_copy_drops_the_topic(pair):
    assert pair.leader.turn(DeleteTopic("logs")) == {}              # parked
    assert pair.leader.core.replicas.placements.deletion_wanted("logs")
    assert pair.leader.exists("logs")                                   # not before the state
    tombstone = pair.roles_message(leader=None, epoch=2, version=2, deleted=True)
    replies = pair.leader.turn(tombstone, first=2)
    assert replies == {2: {"roles": 1},
                       1: {"topic": "logs", "deleted": True, "routers_removed": []}}
    assert not pair.leader.exists("logs") and pair.leader.core.replicas.role("logs") is None
    pair.follower.restart()                                     # away while it happened
    assert pair.follower.exists("logs")
    pair.follower.call(tombstone)
    assert not pair.follower.exists("logs")
    pair.follower.call(pair.roles_message(version=1))           # an older state, late
    assert not pair.follower.exists("logs")
    for harness in (pair.leader, pair.follower):
        harness.restart()                                       # the deletion was logged
        assert not harness.exists("logs")


def test_a_delete_on_a_follower_goes_to_the_leader_and_if_empty_is_kept(pair):
    with pytest.raises(TopicsError) as refused:
        pair.follower.call(DeleteTopic("logs"))
    assert refused.value.code == ErrorCode.NOT_LEADER
    with pytest.raises(TopicsError) as refused:
        pair.leader.call(DeleteTopic("logs", if_empty=True))
    assert refused.value.code == ErrorCode.TOPIC_NOT_EMPTY
    assert not pair.leader.core.replicas.placements.deletion_wanted("logs")
    assert pair.leader.exists("logs")


def test_a_copy_that_missed_the_deletion_is_dropped_for_the_new_topic_of_the_name(pair):
    pair.leader.call(pair.roles_message(leader=None, epoch=2, version=2, deleted=True))
    assert not pair.leader.exists("logs")                       # the follower missed it
    reborn = pair.roles_message(epoch=3, version=3, first_epoch=3)
    for harness in (pair.leader, pair.follower):
        harness.call(reborn)
    old = pair.follower.core.registry.get("logs")
    assert old.head == 0 and old.epochs.entries() == []          # a fresh copy
    pair.leader.append("logs", [b'"new"'], acks="leader")
    pair.rounds()
    topic = pair.follower.core.registry.get("logs")
    assert (topic.head, topic.count, topic.epochs.entries()) == (1, 1, [(3, 1)])
    assert pair.follower.core.replicas.cut.resets == 0          # fetched fresh, not reset
    pair.follower.restart()
    assert pair.follower.core.registry.get("logs").head == 1
