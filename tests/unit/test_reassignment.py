"""Moving replicas (cluster/reassignment.py) as pure functions, and the move requests the
cluster member serves on an in-memory ZooKeeper (supervisor/move_request.py): a move adds
the target's new nodes, waits for each in the ISR, moves leadership off a leaving node,
then shrinks to the target; a drain picks the least-loaded free node; bad targets are
refused and change nothing."""

import dataclasses

import pytest

from supervisor.cluster_member import ClusterMember
from topics_actors.cluster import reassignment
from topics_actors.cluster.isr_tracker import IsrTracker
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.cluster.znodes import MemoryEnsemble, MemoryZnodes
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Reassign

LIVE = {"a", "b", "c", "d"}


def state(replicas="ab", isr=None, leader="a", epoch=3, target=None):
    return ReplicaState(tuple(replicas), tuple(isr if isr is not None else replicas), leader,
                        epoch, 1, target=tuple(target) if target else None)


def test_a_move_adds_waits_for_the_isr_moves_the_leader_then_shrinks():
    moving = reassignment.moved(state(), ("c", "b"))
    assert moving.target == ("c", "b") and moving.replicas == ("a", "b")
    added = reassignment.step(moving, LIVE, set(), 2)
    assert added.replicas == ("a", "b", "c") and added.isr == ("a", "b")
    assert added.leader == "a" and added.leader_epoch == 3      # same epoch: no failover
    assert reassignment.step(added, LIVE, set(), 2) is None     # c not in sync yet
    synced = dataclasses.replace(added, isr=("a", "b", "c"))
    led = reassignment.step(synced, LIVE, {"c"}, 2)             # c quarantined: b leads
    assert (led.leader, led.leader_epoch, led.isr) == ("b", 4, ("a", "b", "c"))
    done = reassignment.step(led, LIVE, set(), 2)
    assert (done.replicas, done.isr, done.target, done.leader) == (("c", "b"), ("c", "b"),
                                                                   None, "b")
    assert reassignment.step(done, LIVE, set(), 2) is None


def test_a_move_keeping_the_leader_needs_no_new_epoch_and_order_alone_changes_at_once():
    synced = state("abc", target="ac", isr="abc")
    synced = dataclasses.replace(synced, replicas=("a", "b", "c"), target=("a", "c"))
    done = reassignment.step(synced, LIVE, set(), 2)
    assert (done.replicas, done.leader_epoch, done.target) == (("a", "c"), 3, None)
    assert reassignment.moved(state(), ("a", "b")) is None
    reordered = reassignment.moved(state(), ("b", "a"))
    assert reordered.replicas == ("b", "a") and reordered.target is None
    offline = dataclasses.replace(synced, leader=None)
    assert reassignment.step(offline, LIVE, set(), 2) is None   # re-election comes first


def test_a_bad_target_is_refused():
    current = state()
    for target, code in ((["a"], "invalid_request"), (["a", "a"], "invalid_request"),
                         (["a", "x"], "not_enough_replicas"), ("ab", "invalid_request")):
        with pytest.raises(TopicsError) as refused:
            reassignment.checked_target("t", current, target, sorted(LIVE))
        assert refused.value.code.wire == code, target
    assert reassignment.checked_target("t", current, ["d", "c"], sorted(LIVE)) == ("d", "c")


def test_a_drain_replaces_the_node_by_the_least_loaded_free_one():
    states = {"t1": state("ab"), "t2": state("bc", leader="b"), "t3": state("cd", leader="c"),
              "t4": state("a")}
    targets = reassignment.drain_targets(states, "a", sorted(LIVE))
    assert targets == {"t1": ("d", "b"), "t4": ("b",)}    # d held 1; then b, c, d 2 each
    with pytest.raises(TopicsError) as refused:
        reassignment.drain_targets({"t": state("abc")}, "a", ["a", "b", "c"])
    assert refused.value.code.wire == "not_enough_replicas"


def test_the_leader_counts_a_new_replica_from_its_fetches_and_forgets_one_that_left():
    tracker = IsrTracker("a", ("a", "b"), ("a", "b"), 1, 1000, 1, 11, 11, now_ms=0)
    tracker.set_replicas(("a", "b", "c"), now_ms=5)
    assert tracker.proposal(10) is None                # c has fetched nothing yet
    tracker.fetched("c", 11, now_ms=20)
    tracker.ops_fetched("c", 1)                        # the same fetch: no ops yet
    assert tracker.proposal(20) == ("a", "b", "c")
    tracker.isr_written(("a", "b", "c"))
    tracker.set_replicas(("a", "c"), now_ms=30)
    tracker.isr_written(("a", "c"))
    assert set(tracker.followers) == {"c"} and tracker.leader_committed(12) is False
    tracker.fetched("c", 12, now_ms=40)
    assert tracker.hw_seq == 11                        # b no longer counts


def _member(ensemble, node_id):
    member = ClusterMember(MetadataStore(MemoryZnodes(ensemble), node_id), {})
    member.join()
    return member


def test_the_member_stores_targets_and_the_controller_carries_the_move_out():
    ensemble = MemoryEnsemble()
    nodes = {n: _member(ensemble, n) for n in "abc"}
    nodes["a"].turn()
    store = nodes["a"].store
    store.create("t", state("ab", epoch=1))
    answers = []
    nodes["b"].admin(Reassign(topic="t", replicas=["c", "x"]), lambda *a: answers.append(a))
    nodes["b"].admin(Reassign(topic="t", replicas=["c", "b"]), lambda *a: answers.append(a))
    nodes["b"].admin(Reassign(drain="zz"), lambda *a: answers.append(a))
    nodes["b"].turn()
    assert answers[0][1].code.wire == "not_enough_replicas"
    assert answers[1] == ({"moves": [{"topic": "t", "replicas": ["a", "b"],
                                      "target": ["c", "b"]}]},)
    assert answers[2][1].code.wire == "not_found"
    nodes["a"].turn()                                  # the controller adds c
    assert store.read("t").state.replicas == ("a", "b", "c")
    versioned = store.read("t")
    store.swap("t", dataclasses.replace(versioned.state, isr=("a", "b", "c")),
               versioned.version)                      # as the leader would, once c caught up
    nodes["a"].turn()
    nodes["a"].turn()
    final = store.read("t").state
    assert (final.replicas, final.leader, final.leader_epoch, final.target) == (
        ("c", "b"), "c", 2, None)


def test_a_drained_node_gets_no_new_copy_until_it_starts_again():
    from topics_actors.protocol.control import PlaceTopic
    ensemble = MemoryEnsemble()
    nodes = {n: _member(ensemble, n) for n in "abc"}
    nodes["a"].turn()
    answers = []
    nodes["b"].admin(Reassign(drain="c"), lambda *a: answers.append(a))
    nodes["b"].turn()
    assert answers == [({"moves": []},)] and nodes["b"].view()["draining"] == ["c"]
    for i in range(6):                       # placement would rotate over all three
        nodes["c"].submit(PlaceTopic("shard", 0, 1, f"t{i}", {"replication_factor": 2}))
    nodes["c"].submit(PlaceTopic("shard", 0, 1, "local", {"replication_factor": 1}))
    nodes["c"].submit(PlaceTopic("shard", 0, 1, "wide", {"replication_factor": 3}))
    nodes["c"].turn()
    store = nodes["a"].store
    assert all(sorted(store.read(f"t{i}").state.replicas) == ["a", "b"] for i in range(6))
    assert store.read("local").state.replicas != ("c",)     # not kept on the drained node
    assert sorted(store.read("wide").state.replicas) == ["a", "b", "c"]   # needs all three
    nodes["c"].store.znodes.close()
    again = _member(ensemble, "c")                            # it starts again
    assert store.draining() == set() and again.store.node_id == "c"
