"""A placed topic's config lives in its cluster state (docs/CLUSTER.md 10): a put_topic that
changes it, on the topic's leader, waits while the supervisor writes the new config there
(topic_change), and every copy takes it from its next replica_roles and logs it. The
type and the replication factor cannot change; a follower sends the request to the leader.
Two shards of two nodes in one process (tools/testing/replica_pair.py)."""


import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import PutTopic, Retain
from topics_actors.topic_config import parse_config

pytestmark = pytest.mark.timeout(30)

BEFORE = {"durability": "disk", "cap_records": 1000}
AFTER = {"durability": "disk", "cap_records": 10, "replication_factor": 2}


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs", BEFORE)
    yield pair
    pair.close()


def _config(harness) -> dict:
    return harness.core.registry.get("logs").config.to_json()


def test_a_config_change_waits_for_the_cluster_state_and_every_copy_takes_it(pair):
    wanted = parse_config(AFTER, "logs").to_json()
    assert pair.leader.turn(PutTopic("logs", AFTER)) == {}       # parked
    assert pair.leader.core.replicas.placements.config_wanted("logs") == wanted
    assert _config(pair.leader)["cap_records"] == 1000           # not before the state says
    pair.config = wanted                                          # the supervisor's CAS
    replies = pair.leader.turn(pair.roles_message(version=2), first=2)
    assert replies == {2: {"roles": 1},
                       1: {"topic": "logs", "created": False, "config": wanted}}
    assert _config(pair.leader) == wanted
    assert pair.leader.core.replicas.placements.config_wanted("logs") is None
    assert _config(pair.follower)["cap_records"] == 1000
    pair.follower.call(pair.roles_message(version=2))
    assert _config(pair.follower) == wanted
    pair.leader.append("logs", *[[b"%d" % n] for n in range(50)], acks="leader")
    pair.leader.call(Retain())
    pair.rounds()
    for harness in (pair.leader, pair.follower):
        topic = harness.core.registry.get("logs")
        assert (topic.earliest_seq(), topic.head) == (41, 50)
    pair.follower.restart()                                       # the config was logged
    assert _config(pair.follower) == wanted


def test_an_unchanged_config_is_answered_at_once_and_a_change_of_copies_or_type_refused(pair):
    reply = pair.leader.call(PutTopic("logs", {**BEFORE, "replication_factor": 2}))
    assert reply["created"] is False and reply["config"]["cap_records"] == 1000
    with pytest.raises(TopicsError) as refused:
        pair.leader.call(PutTopic("logs", {**BEFORE, "replication_factor": 3}))
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert "no reassignment" in refused.value.message
    with pytest.raises(TopicsError):    # PUT replaces the config: a left-out factor is 1
        pair.leader.call(PutTopic("logs", {"cap_records": 5}))
    with pytest.raises(TopicsError) as refused:
        pair.leader.call(PutTopic("logs", {"type": "queue", "replication_factor": 2}))
    assert refused.value.code == ErrorCode.TOPIC_EXISTS_INCOMPATIBLE
    assert pair.leader.core.replicas.placements.config_wanted("logs") is None
    assert _config(pair.leader)["cap_records"] == 1000


def test_a_follower_sends_a_config_change_to_the_leader(pair):
    with pytest.raises(TopicsError) as refused:
        pair.follower.call(PutTopic("logs", AFTER))
    assert refused.value.code == ErrorCode.NOT_LEADER
    assert refused.value.detail["leader"] == "a"
    assert pair.follower.core.replicas.placements.config_wanted("logs") is None


def test_a_late_older_state_does_not_take_a_new_config_back(pair):
    wanted = parse_config(AFTER, "logs").to_json()
    old = pair.roles_message(version=1)
    pair.config = wanted
    for harness in (pair.leader, pair.follower):
        harness.call(pair.roles_message(version=2))
        harness.call(old)                          # the version-1 state, arriving late
        assert _config(harness) == wanted
