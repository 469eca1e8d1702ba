"""A replicated topic's retention floors come from its leader (spec/replication.md D2, D5):
a follower plans no retention of its own, takes the leader's floors with the records it
fetches (never past its own log end), logs them, and keeps them across a restart. Two
shards of two nodes in one process (tools/testing/replica_pair.py), with a hand-moved
clock."""


import pytest

from tools.testing.manual_clock import ManualClock
from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.protocol.messages import Retain

pytestmark = pytest.mark.timeout(30)



@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def pair(tmp_path, clock):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "logs",
                       {"durability": "fsync", "ttl_ms": 60_000}, clock=clock)
    yield pair
    pair.close()


def _state(harness, name="logs"):
    topic = harness.core.registry.get(name)
    return topic.evict_floor, topic.expiry_floor, topic.earliest_seq(), topic.count


def _live(harness, name: str) -> list[int]:
    """The seqs a replica holds above its floors (a follower serves no reads itself)."""
    core = harness.core
    topic = core.registry.get(name)
    return [seq for seq in range(topic.earliest_seq(), topic.head + 1)
            if core.reader.read(topic, seq) is not None]


def test_a_follower_drops_what_its_leader_dropped_and_nothing_on_its_own(pair, clock):
    pair.leader.append("logs", *[[b"%d" % n, None, None, None] for n in range(10)],
                       acks="leader")
    pair.rounds()
    assert pair.follower.core.registry.get("logs").head == 10
    clock.now += 61_000                               # every record is past its TTL
    pair.follower.call(Retain())                      # the reclaimer's pass: not its call
    assert _state(pair.follower) == (0, 0, 1, 10)
    pair.leader.append("logs", [b'"late"', None, None, None], acks="leader")
    pair.leader.call(Retain())
    assert _state(pair.leader) == (0, 10, 11, 1)
    pair.rounds()
    assert _state(pair.follower) == (0, 10, 11, 1) and _live(pair.follower, "logs") == [11]
    pair.follower.restart()                           # the floors were logged
    assert _state(pair.follower) == (0, 10, 11, 1)


def test_a_follower_behind_a_capped_leader_gets_its_floors_and_no_record_below(tmp_path,
                                                                              clock):
    pair = ReplicaPair(pair_env(tmp_path, "c"), pair_env(tmp_path, "d"), "capped",
                       {"durability": "disk", "cap_records": 100}, clock=clock)
    try:
        for first in range(0, 3000, 500):
            pair.leader.append("capped", *[[b"%d" % n, None, None, None]
                                           for n in range(first, first + 500)], acks="leader")
        assert _state(pair.leader, "capped") == (2900, 0, 2901, 100)
        pair.rounds()
        assert _state(pair.follower, "capped") == (2900, 0, 2901, 100)
        assert _live(pair.follower, "capped") == list(range(2901, 3001))
        pair.follower.restart()
        assert _state(pair.follower, "capped") == (2900, 0, 2901, 100)
    finally:
        pair.close()
