"""An append that may not create its topic (`create: false`), on a cluster node that knows
no state for the name, asks the cluster to look the name up (place_topic with create
false). When the supervisor finds none, it lists the name in `absent` of its next
replica_roles, and the waiting append is answered topic_not_found then, not after the
placement wait. A creation waiting on the same kind of answer is not ended by it. Reads,
deletes and queue requests naming an unknown topic look it up the same way (a topic another
node created is found: read-your-writes), and an `absent` read for an older lookup never
answers a newer one."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import Append, Diff, GetTopic
from topics_actors.shard.replication.placement import PlacementState

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def shard(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs",
                       {"durability": "disk"})
    yield pair.leader
    pair.close()


def test_a_lookup_the_cluster_answers_absent_is_topic_not_found_at_once(shard):
    book = shard.core.replicas.placements
    assert shard.turn(Append("nope", [[b"1"]], create=False)) == {}      # parked
    assert book.asked("nope").state is PlacementState.LOOKING_UP         # a lookup
    replies = shard.turn(ReplicaRoles([], absent={"nope": 1 << 62}), first=2)
    assert replies[2] == {"roles": 0}
    error = replies[1]
    assert isinstance(error, TopicsError) and error.code == ErrorCode.TOPIC_NOT_FOUND
    assert not shard.exists("nope") and book.asked("nope") is None       # answered, forgotten
    assert book.to_place() == []


def test_absent_does_not_end_a_creation_waiting_for_its_state(shard):
    book = shard.core.replicas.placements
    assert shard.turn(Append("fresh", [[b"1"]])) == {}                   # may create: parked
    assert book.asked("fresh").state is PlacementState.PLACING
    assert shard.turn(ReplicaRoles([], absent={"fresh": 1 << 62}), first=2) == {2: {"roles": 0}}
    assert book.asked("fresh").state is PlacementState.PLACING           # still waiting
    assert [(name, create) for name, _cfg, create, _asked in book.to_place()] == [("fresh", True)]


def test_a_second_lookup_of_an_answered_name_asks_again(shard):
    book = shard.core.replicas.placements
    shard.turn(Append("nope", [[b"1"]], create=False))
    shard.turn(ReplicaRoles([], absent={"nope": 1 << 62}), first=2)
    assert shard.turn(Append("nope", [[b"2"]], create=False), first=3) == {}
    assert book.asked("nope").state is PlacementState.LOOKING_UP         # asked again


def _role(topic: str) -> dict:
    return {"topic": topic, "leader": "b", "leader_epoch": 1, "isr": ["b"], "replicas": ["b"],
            "version": 1, "config": {}, "leader_shards": ["inproc://b"]}


@pytest.mark.parametrize("request_", [GetTopic("elsewhere", False), Diff("elsewhere", 0)])
def test_a_read_of_an_unknown_topic_looks_it_up_and_is_sent_again_once_found(shard, request_):
    """Another node created the topic; this node's states lag: the read waits for the
    lookup, then tells the client to send it again (now not_leader, followed)."""
    book = shard.core.replicas.placements
    assert shard.turn(request_) == {}                                    # parked
    assert book.asked("elsewhere").state is PlacementState.LOOKING_UP
    replies = shard.turn(ReplicaRoles([_role("elsewhere")]), first=2)
    error = replies[1]
    assert isinstance(error, TopicsError) and error.code == ErrorCode.NOT_READY
    assert error.detail == {"reason": "placed"}
    again = shard.batch(GetTopic("elsewhere", False))[0]
    assert again.code == ErrorCode.NOT_LEADER and again.detail["leader"] == "b"


def test_an_absent_read_for_an_older_lookup_does_not_answer_a_newer_one(shard):
    """A name looked up and found absent; another node then creates it; a new lookup here
    must not be answered by the old absent read still in the supervisor's list."""
    book = shard.core.replicas.placements
    shard.turn(GetTopic("late", False))
    stale = book.asked("late").asked_ns - 1
    assert shard.turn(ReplicaRoles([], absent={"late": stale}), first=2) == {2: {"roles": 0}}
    assert book.asked("late").state is PlacementState.LOOKING_UP         # still waiting
    assert [(t, c) for t, _cfg, c, _a in book.to_place()] == [("late", False)]
    fresh = book.asked("late").asked_ns
    replies = shard.turn(ReplicaRoles([], absent={"late": fresh}), first=3)
    assert replies[1].code == ErrorCode.TOPIC_NOT_FOUND
