"""What makes a write safe to retry across a failover, on a leader and a follower shard of
two nodes in one process (tools/testing/replica_pair.py): idempotency and session keys
travel with a replicated topic's records (shard/replication/replica_keys.py), logged in the
follower's own WAL, so once it leads, a retry of a write it holds is answered with the
write's original seqs, not stored again; and a leader cut off from ZooKeeper acknowledges
no write in any ack mode until its session is back (leader_duties.py)."""

import pytest

from tools.testing.replica_pair import FOLLOWER, ReplicaPair, pair_env
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import Append
from topics_actors.shard.replication import replica_keys
from topics_actors.shard.replication.replica_keys import KeyTrail

pytestmark = pytest.mark.timeout(30)


def _write(key: str, n: int) -> Append:
    return Append("t", [[b"%d" % i, None, None, None] for i in range(n)],
                  idempotency_key=key, acks="leader")


@pytest.fixture(params=["fsync", "disk"])
def pair(tmp_path, request):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "t",
                       {"durability": request.param})
    pair.durability = request.param
    yield pair
    pair.close()


def test_a_retry_through_the_new_leader_gets_the_original_seqs(pair):
    first = pair.leader.call(_write("~s1:1", 3))
    user = pair.leader.call(_write("order-7", 2))
    pair.leader.call(_write("~s1:2", 1))
    pair.rounds()
    pair.follower.restart()                    # the keys were logged with the records
    pair.roles(leader=FOLLOWER, epoch=2, isr=(FOLLOWER,))
    again = pair.follower.call(_write("~s1:1", 3))
    assert again["deduped"] and (again["first_seq"], again["last_seq"]) == (1, 3)
    assert first["first_seq"] == 1
    again = pair.follower.call(_write("order-7", 2))
    assert again["deduped"] and again["first_seq"] == user["first_seq"] == 4
    fresh = pair.follower.call(_write("~s1:3", 1))
    assert not fresh["deduped"] and fresh["first_seq"] > 6
    if pair.durability == "fsync":      # a disk copy leads past its head reservation
        assert fresh["first_seq"] == 7
    assert pair.follower.core.registry.get("t").head == fresh["first_seq"]


def test_keys_of_writes_the_follower_lacks_do_not_travel_ahead_of_them(pair):
    pair.leader.call(_write("~s1:1", 2000))
    pair.leader.call(_write("~s1:2", 1))       # past the first answer's 2000 records
    pair.round()
    follower = pair.follower.core.registry.get("t")
    assert follower.head == 2000
    assert follower.dedupe.lookup("~s1:1", 0, 1) is not None
    assert follower.dedupe.lookup("~s1:2", 0, 1) is None
    pair.rounds()
    assert follower.dedupe.lookup("~s1:2", 0, 1).first_seq == 2001


def test_a_new_leader_passes_on_the_keys_it_had_from_its_own(pair):
    pair.leader.call(_write("~s1:1", 2))
    pair.rounds()
    pair.roles(leader=FOLLOWER, epoch=2, isr=(FOLLOWER,))
    new = pair.follower.core
    trail = new.replicas.replicas.lead("t").keys        # seeded from its dedupe index
    assert trail.within(new.registry.get("t"), 1, 3, 0) == [["~s1:1", 1, 2]]
    assert trail.within(new.registry.get("t"), 1, 2, 0) == []     # the write ends at 2


def test_a_trail_keeps_the_newest_keys_and_skips_stale_ones(tmp_path):
    trail = KeyTrail()
    for n in range(1, replica_keys.KEYS_MAX + replica_keys.KEYS_SLACK + 2):
        trail.add(f"k{n}", n, n)
    assert len(trail) == replica_keys.KEYS_MAX
    assert trail.lasts[0] == replica_keys.KEYS_SLACK + 2
    trail.add("old", 5, 5)                     # a retry's older write: not again
    assert trail.rows[-1][0] != "old"
    trail.forget_below(trail.lasts[-1])
    assert len(trail) == 1


def test_a_leader_cut_off_from_zookeeper_acknowledges_no_write_in_any_mode(pair):
    """While fenced (its session suspended), a leader holds `acks: leader` and `none` answers
    too; they go out once the session is back and the followers have the records, and are
    answered in doubt if leadership moved instead."""
    fenced = pair.roles_message()
    fenced = ReplicaRoles(fenced.roles, True, True)
    pair.leader.call(fenced)
    out = pair.leader.turn(_write("~s1:1", 1), Append("t", [[b"1", None, None, None]],
                                                      acks="none"))
    assert out == {}                                   # nothing answered while cut off
    pair.rounds()                                      # the followers copy them meanwhile
    answered = pair.leader.turn(pair.roles_message(), first=10)    # the session is back
    assert sorted(answered) == [1, 2, 10] and answered[1]["last_seq"] == 1
    pair.leader.call(fenced)
    assert pair.leader.turn(_write("~s1:2", 1), first=20) == {}
    moved = pair.leader.turn(pair.roles_message(leader=FOLLOWER, epoch=2), first=30)
    error = moved[20]
    assert error.code.wire == "not_leader" and error.detail["in_doubt"]
