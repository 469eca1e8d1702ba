"""The supervisor's cluster member on an in-memory ZooKeeper: the first node becomes the
controller, a leader's departure moves leadership to an in-sync replica (not to a node that
reports the topic quarantined), the controller's own departure hands the role on."""

from supervisor.cluster_member import ClusterMember
from tests.support import wait_for
from topics_actors.errors import InvariantViolation
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.cluster.znodes import MemoryEnsemble, MemoryZnodes


def members(*ids, infos=None):
    ensemble = MemoryEnsemble()
    out = {}
    for node_id in ids:
        member = ClusterMember(MetadataStore(MemoryZnodes(ensemble), node_id),
                               (infos or {}).get(node_id, {"advertise": node_id}))
        member.join()
        out[node_id] = member
    return out


def test_the_first_to_turn_controls_and_everyone_sees_the_same_view():
    nodes = members("a", "b", "c")
    for node_id in ("a", "b", "c"):
        nodes[node_id].turn()
    views = [nodes[n].view() for n in "abc"]
    assert {v["controller"] for v in views} == {"a"}
    assert all(sorted(v["nodes"]) == ["a", "b", "c"] for v in views)
    assert nodes["a"].store.controller_epoch == 1 and nodes["b"].store.controller_epoch == 0


def test_failover_of_leaders_and_of_the_controller():
    nodes = members("a", "b", "c", infos={"b": {"quarantined": ["t2"]}})
    nodes["a"].turn()
    store = nodes["a"].store
    store.create("t1", ReplicaState(("a", "b", "c"), ("a", "b", "c"), "a", 1, 1))
    store.create("t2", ReplicaState(("a", "b", "c"), ("a", "b", "c"), "a", 1, 1))
    store.create("t3", ReplicaState(("b", "c"), ("b", "c"), "b", 3, 1))
    nodes["c"].store.znodes.close()                 # c leaves: an ISR shrink only
    nodes["a"].turn()
    assert store.read("t1").state.isr == ("a", "b") and store.read("t1").state.leader == "a"
    nodes["a"].stop()                               # the controller and leader leaves
    nodes["b"].turn()
    view = nodes["b"].view()
    assert view["controller"] == "b" and list(view["nodes"]) == ["b"]
    assert view["topics"]["t1"] == {"leader": "b", "leader_epoch": 2, "isr": ["b"],
                                    "replicas": ["a", "b", "c"]}
    assert view["topics"]["t2"]["leader"] is None   # b holds a quarantined copy of t2
    assert view["topics"]["t3"]["leader"] == "b" and view["topics"]["t3"]["leader_epoch"] == 3
    assert nodes["b"].store.controller_epoch == 2


def test_a_leaders_isr_change_is_written_without_nodes_zookeeper_lists_as_gone():
    from topics_actors.protocol.control import IsrChange
    nodes = members("a", "b", "c")
    nodes["a"].turn()
    store = nodes["a"].store
    store.create("t", ReplicaState(("a", "b", "c"), ("a",), "a", 4, 1))
    nodes["c"].store.znodes.close()                 # c's session ended
    nodes["a"].submit(IsrChange("shard", 0, 1, "t", 4, 0, ["a", "b", "c"]))
    nodes["a"].turn()
    assert store.read("t").state.isr == ("a", "b")  # c stays out until it registers again
    nodes["a"].submit(IsrChange("shard", 0, 1, "t", 3, 0, ["a"]))   # an old epoch's
    nodes["a"].turn()
    assert store.read("t").state.isr == ("a", "b")


def test_a_topic_is_placed_once_and_an_impossible_one_is_refused():
    from topics_actors.protocol.control import PlaceTopic
    nodes = members("a", "b")
    nodes["a"].turn()
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "big", {"replication_factor": 3}))
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "two", {"replication_factor": 2}))
    nodes["b"].submit(PlaceTopic("shard", 0, 1, "two", {"replication_factor": 2}))
    nodes["a"].turn()
    nodes["b"].turn()
    assert nodes["a"].store.read("big") is None
    assert "needs 3 live nodes" in nodes["a"].roles()[3]["big"]
    assert sorted(nodes["a"].store.read("two").state.replicas) == ["a", "b"]
    assert [r["topic"] for r in nodes["b"].roles()[1]] == ["two"]


def test_a_lookup_of_a_missing_name_is_answered_absent_until_the_name_is_placed():
    from topics_actors.protocol.control import PlaceTopic
    nodes = members("a", "b")
    nodes["a"].turn()
    serial = nodes["a"].roles()[0]
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "t", {}, create=False, asked_ns=7))
    nodes["a"].turn()
    assert nodes["a"].store.read("t") is None                     # a lookup creates nothing
    assert nodes["a"].roles()[4] == {"t": 7} and nodes["a"].roles()[0] > serial
    serial = nodes["a"].roles()[0]
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "t", {}, create=False, asked_ns=9))
    nodes["a"].turn()
    assert nodes["a"].roles()[4] == {"t": 9} and nodes["a"].roles()[0] > serial   # re-sent
    nodes["b"].submit(PlaceTopic("shard", 0, 1, "t", {}))        # created through another node
    nodes["b"].turn()
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "t", {}, create=False, asked_ns=11))
    nodes["a"]._serve_requests(nodes["a"].store.nodes())          # the lookup alone finds it
    assert nodes["a"].roles()[4] == {"t": 9}                      # not answered absent
    nodes["a"].turn()
    assert nodes["a"].roles()[4] == {} and [r["topic"] for r in nodes["a"].roles()[1]] == ["t"]


def test_a_leaders_config_change_is_written_only_by_the_leader_and_keeps_the_copies():
    from topics_actors.protocol.control import TopicChange
    from topics_actors.topic_config import parse_config
    nodes = members("a", "b")
    nodes["a"].turn()
    store = nodes["a"].store
    before = parse_config({"replication_factor": 2, "cap_records": 100}, "t").to_json()
    after = parse_config({"replication_factor": 2, "cap_records": 10}, "t").to_json()
    store.create("t", ReplicaState(("a", "b"), ("a", "b"), "a", 3, 1, before))
    nodes["b"].submit(TopicChange("shard", 0, 1, "t", 3, after))   # not the leader
    nodes["a"].submit(TopicChange("shard", 0, 1, "t", 2, after))   # an old epoch
    nodes["a"].submit(TopicChange("shard", 0, 1, "t", 3, {**after,
                                                              "replication_factor": 1}))
    for node_id in "ab":
        nodes[node_id].turn()
    assert store.read("t").state.config == before and store.read("t").version == 0
    nodes["a"].submit(TopicChange("shard", 0, 1, "t", 3, after))
    nodes["a"].turn()
    written = store.read("t")
    assert written.state.config == after and written.version == 1
    assert written.state.leader_epoch == 3 and written.state.isr == ("a", "b")
    nodes["b"].turn()
    assert [r["config"] for r in nodes["b"].roles()[1]] == [after]


def test_a_deleted_topic_leaves_a_tombstone_and_a_new_one_of_its_name_starts_above_it():
    from topics_actors.protocol.control import PlaceTopic, TopicChange
    nodes = members("a", "b")
    nodes["a"].turn()
    store = nodes["a"].store
    store.create("t", ReplicaState(("a", "b"), ("a", "b"), "a", 4, 1, {"replication_factor": 2}))
    nodes["b"].submit(TopicChange("shard", 0, 1, "t", 4, delete=True))     # not the leader
    nodes["b"].turn()
    assert not store.read("t").state.deleted
    nodes["a"].submit(TopicChange("shard", 0, 1, "t", 4, delete=True))
    nodes["a"].turn()
    tomb = store.read("t").state
    assert (tomb.deleted, tomb.leader, tomb.isr, tomb.leader_epoch) == (True, None, (), 5)
    assert "t" not in nodes["a"].view()["topics"]                 # gone from the view
    assert nodes["a"].roles()[1][0]["deleted"] is True            # shards drop their copies
    nodes["b"].store.znodes.close()
    nodes["a"].turn()                                             # no election on a tombstone
    assert store.read("t").state == tomb
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "t", {"replication_factor": 1}, create=False))
    nodes["a"].turn()
    assert store.read("t").state == tomb                          # a lookup creates nothing
    assert list(nodes["a"].roles()[4]) == ["t"]                   # and finds no live topic
    nodes["a"].submit(PlaceTopic("shard", 0, 1, "t", {"replication_factor": 1}))
    nodes["a"].turn()
    again = store.read("t")
    assert (again.state.deleted, again.state.leader, again.state.first_epoch) == (False, "a", 6)
    assert again.state.leader_epoch == 6 and again.version == 2


def test_a_bug_in_a_turn_ends_the_thread_and_alive_says_so(monkeypatch):
    """An InvariantViolation is not logged and retried every turn like a lost session: the
    thread ends, and alive() turns False (the supervisor then stops the node)."""
    member = ClusterMember(MetadataStore(MemoryZnodes(MemoryEnsemble()), "a"), {})
    turns = []

    def broken_turn():
        turns.append(1)
        raise InvariantViolation("a leader epoch went back")
    monkeypatch.setattr(member, "turn", broken_turn)
    member.start()
    try:
        wait_for(lambda: not member.alive(), 10, "the member's thread to end")
        assert len(turns) == 1
    finally:
        member.stop()
    assert member.alive()          # stopped on purpose: nothing for the supervisor to do
