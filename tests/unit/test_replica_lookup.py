"""An append that may not create its topic (`create: false`), on a cluster node that knows
no state for the name, asks the cluster to look the name up (place_topic with create
false). When the supervisor finds none, it lists the name in `absent` of its next
replica_roles, and the waiting append is answered topic_not_found then, not after the
placement wait. A creation waiting on the same kind of answer is not ended by it."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import Append
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
    replies = shard.turn(ReplicaRoles([], absent=["nope"]), first=2)
    assert replies[2] == {"roles": 0}
    error = replies[1]
    assert isinstance(error, TopicsError) and error.code == ErrorCode.TOPIC_NOT_FOUND
    assert not shard.exists("nope") and book.asked("nope") is None       # answered, forgotten
    assert book.to_place() == []


def test_absent_does_not_end_a_creation_waiting_for_its_state(shard):
    book = shard.core.replicas.placements
    assert shard.turn(Append("fresh", [[b"1"]])) == {}                   # may create: parked
    assert book.asked("fresh").state is PlacementState.PLACING
    assert shard.turn(ReplicaRoles([], absent=["fresh"]), first=2) == {2: {"roles": 0}}
    assert book.asked("fresh").state is PlacementState.PLACING           # still waiting
    assert [(name, create) for name, _config, create in book.to_place()] == [("fresh", True)]


def test_a_second_lookup_of_an_answered_name_asks_again(shard):
    book = shard.core.replicas.placements
    shard.turn(Append("nope", [[b"1"]], create=False))
    shard.turn(ReplicaRoles([], absent=["nope"]), first=2)
    assert shard.turn(Append("nope", [[b"2"]], create=False), first=3) == {}
    assert book.asked("nope").state is PlacementState.LOOKING_UP         # asked again
