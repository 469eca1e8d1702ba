"""The controller's decisions (cluster/leader_election.py) as pure functions: placement of a
new topic, failover only to a live, in-sync, unquarantined replica, offline rather than
unclean, and an epoch bump on every leader change."""

import pytest

from topics_actors.cluster.leader_election import new_topic, place_replicas, reelect
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.errors import ErrorCode, TopicsError


def state(leader, isr, replicas=("a", "b", "c"), epoch=4):
    return ReplicaState(tuple(replicas), tuple(isr), leader, epoch, 1)


def test_placement_is_distinct_live_nodes_rotated_by_topic_id():
    assert place_replicas(["c", "a", "b"], 3, 0) == ("a", "b", "c")
    assert place_replicas(["a", "b", "c"], 2, 4) == ("b", "c")
    leaders = {place_replicas(["a", "b", "c"], 3, tid)[0] for tid in range(3)}
    assert leaders == {"a", "b", "c"}


def test_placement_needs_enough_live_nodes():
    with pytest.raises(TopicsError) as caught:
        place_replicas(["a", "b"], 3, 0)
    assert caught.value.code is ErrorCode.NOT_ENOUGH_REPLICAS


def test_a_new_topic_starts_in_epoch_one_with_every_replica_in_sync():
    created = new_topic(["a", "b", "c"], 3, 1, controller_epoch=7)
    assert created == ReplicaState(("b", "c", "a"), ("b", "c", "a"), "b", 1, 7)


def test_nothing_changes_while_every_isr_member_lives():
    assert reelect(state("a", "abc"), {"a", "b", "c"}, set(), 2) is None


def test_a_dead_follower_leaves_the_isr_without_an_epoch_change():
    after = reelect(state("a", "abc"), {"a", "c"}, set(), 2)
    assert (after.leader, after.isr, after.leader_epoch) == ("a", ("a", "c"), 4)


def test_failover_takes_the_first_live_isr_replica_and_bumps_the_epoch():
    after = reelect(state("a", "abc"), {"b", "c"}, set(), 2)
    assert (after.leader, after.isr, after.leader_epoch, after.controller_epoch) == \
        ("b", ("b", "c"), 5, 2)


def test_out_of_sync_and_quarantined_replicas_are_never_promoted():
    after = reelect(state("a", "ac"), {"b", "c"}, set(), 2)
    assert after.leader == "c"                       # b is live but not in sync
    offline = reelect(state("a", "ac"), {"b", "c"}, {"c"}, 2)
    assert (offline.leader, offline.isr, offline.leader_epoch) == (None, ("a", "c"), 5)


def test_a_quarantined_leader_is_replaced_by_a_clean_isr_member():
    after = reelect(state("a", "abc"), {"a", "b", "c"}, {"a"}, 2)
    assert (after.leader, after.leader_epoch) == ("b", 5)
    assert reelect(state("b", "abc"), {"a", "b", "c"}, {"a"}, 2) is None   # a follows


def test_a_small_topic_stays_on_the_node_that_created_it():
    assert new_topic(["a", "b", "c"], 1, 7, 1, local="c").replicas == ("c",)
    assert len(new_topic(["a", "b", "c"], 3, 7, 1, local="c").replicas) == 3


def test_offline_waits_for_an_isr_member_and_not_for_any_replica():
    offline = state(None, "a", epoch=5)
    assert reelect(offline, {"b", "c"}, set(), 2) is None     # unclean election is off
    back = reelect(offline, {"a", "b"}, set(), 2)
    assert (back.leader, back.isr, back.leader_epoch) == ("a", ("a",), 6)


def test_a_leader_that_recovered_in_the_current_epoch_is_elected_again_in_a_new_one():
    """Issue 34: a power loss of every node leaves no controller to see the leader go; it
    comes back, registers that its copy recovered in epoch 4 (its log may have lost a tail
    its followers hold), and gets a new epoch; it may lead again."""
    after = reelect(state("a", "abc"), {"a", "b", "c"}, set(), 2, unsettled_epoch=4)
    assert after.leader_epoch == 5 and after.leader == "a" and after.isr == ("a", "b", "c")
    assert reelect(after, {"a", "b", "c"}, set(), 2, unsettled_epoch=4) is None
    assert reelect(state("a", "abc"), {"a", "b", "c"}, set(), 2, unsettled_epoch=3) is None
