"""Replicated topics on three nodes and a real ZooKeeper (docs/CLUSTER.md): placement,
writes through any node, the high watermark, acks modes and min_isr, and failover under
`acks: all` writes with an oracle of acknowledged records (spec/replication.md D8: 0 acked
writes lost, no divergence between the copies once they converge)."""

import os
import signal

import orjson
import pytest

from tools.testing.cluster_harness import (
    Writer, cluster_env, copies, replication, wait_caught_up, wait_isr,
)
from tools.testing.node_harness import wait_for
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes
from topics_actors.errors import TopicsError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHARDS = 2


@pytest.fixture
def observer(zk_connect):
    store = MetadataStore(ZooKeeperZnodes(zk_connect, 2000), "observer")
    yield store
    store.znodes.close()


@pytest.fixture
def cluster(make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid)) for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3 and all(
        info.get("shards") for info in observer.nodes().values()), 30, "three registrations")
    return nodes


def test_a_replicated_topic_is_written_and_read_through_any_node(cluster, observer):
    client = cluster["a"].client()
    created = client.put_topic("orders", replication_factor=3, durability="fsync")
    assert created["config"]["replication_factor"] == 3 and created["config"]["min_isr"] == 2
    state = observer.read("orders").state
    assert sorted(state.replicas) == ["a", "b", "c"] and state.leader_epoch == 1
    view = wait_isr(cluster["c"], "orders", 3)
    assert view["leader"] == state.leader and view["hw"] == 0
    for nid, node in cluster.items():                       # HTTP through every node
        reply = node.http("POST", "/v0/topics/orders", {"records": [{"data": {"via": nid}}]})
        assert reply.status in (200, 201), reply.body
    for i in range(20):                                     # ZeroMQ through a non-leader
        follower = next(n for n in "abc" if n != state.leader)
        cluster[follower].client().append("orders", [{"data": {"i": i}}], acks="all")
    for nid, node in cluster.items():
        view = replication(node, "orders")
        assert view["hw"] == 23 and sorted(view["isr"]) == ["a", "b", "c"], (nid, view)
    diff = cluster["b"].http("POST", "/v0/topics/orders/diff", {"from_seq": 0, "limit": 100})
    assert [r["$seq"] for r in diff.json()["records"]] == list(range(1, 24))
    bad = cluster["a"].http("POST", "/v0/topics/orders", {"records": [{"data": 1}],
                                                          "acks": "some"})
    assert bad.status == 400 and bad.json()["error"]["code"] == "invalid_request"
    gone = cluster["a"].http("POST", "/v0/topics/orders/delete", {"before_seq": 5})
    assert gone.status == 400 and "replicated" in gone.json()["error"]["message"]
    assert cluster["a"].http("GET", "/v0/cluster").json()["topics"]["orders"]["leader"] == (
        state.leader)
    led = cluster[state.leader].http("GET", "/v0/cluster").json()["topics"]["orders"]
    assert set(led["followers"]) == set("abc") - {state.leader}
    metrics = cluster[state.leader].http("GET", "/v0/metrics").body.decode()
    assert 'topics_topic_isr_size{topic="orders"} 3' in metrics
    assert "topics_leader_topics 1" in metrics and "topics_under_replicated_topics 0" in metrics
    assert metrics.count('topics_follower_lag_records{topic="orders"') == 2
    for node in cluster.values():
        node.stop()
    found = copies(cluster, SHARDS, "orders")
    assert len(found["a"]) == 23 and found["a"] == found["b"] == found["c"]


def test_min_isr_refuses_acks_all_and_the_watermark_hides_leader_acked_writes(
        make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid)) for nid in "ab"}
    wait_for(lambda: len(observer.nodes()) == 2, 30, "two registrations")
    client = nodes["a"].client()
    client.put_topic("pair", replication_factor=2, min_isr=2, durability="fsync")
    wait_isr(nodes["a"], "pair", 2)
    client.append("pair", [{"data": 1}], acks="all")
    leader = observer.read("pair").state.leader
    follower = "b" if leader == "a" else "a"
    os.killpg(nodes[follower].proc.pid, signal.SIGSTOP)    # past the session timeout
    try:
        wait_isr(nodes[leader], "pair", 1)
        with pytest.raises(TopicsError) as refused:
            nodes[leader].client(retry_deadline_ms=500).append("pair", [{"data": 2}],
                                                               acks="all")
        assert refused.value.code.wire == "not_enough_replicas"
        nodes[leader].client().append("pair", [{"data": 3}], acks="leader")
        view = replication(nodes[leader], "pair")
        assert view["hw"] == 1                              # written, not visible
        page = nodes[leader].http("POST", "/v0/topics/pair/diff", {"from_seq": 0})
        assert [r["$seq"] for r in page.json()["records"]] == [1]
    finally:
        os.killpg(nodes[follower].proc.pid, signal.SIGCONT)
    # The stopped node's session ended: it registers again once it runs, and catches up.
    wait_for(lambda: follower in observer.nodes(), 30, "the follower back")
    view = wait_isr(nodes[leader], "pair", 2, timeout_s=60)
    assert view["hw"] == 2
    page = nodes[leader].http("POST", "/v0/topics/pair/diff", {"from_seq": 0})
    assert [r["data"] for r in page.json()["records"]] == [1, 3]


def test_killing_the_leader_loses_no_acked_write_and_the_copies_converge(
        cluster, observer, make_node, zk_connect):
    cluster["a"].client().put_topic("ledger", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "ledger", 3)
    leader = observer.read("ledger").state.leader
    entry = next(n for n in "abc" if n != leader)
    writer = Writer(cluster[entry], "ledger")
    writer.start()
    wait_for(lambda: len(writer.acked) >= 50, 60, "acked writes before the kill")
    cluster[leader].kill_group()                          # kill -9 of the leader's node
    state = wait_for(lambda: (s := observer.read("ledger").state).leader not in (None, leader)
                     and s, 30, "a new leader")
    assert state.leader_epoch == 2 and leader not in state.isr
    before = len(writer.acked)
    wait_for(lambda: len(writer.acked) >= before + 50, 60, "acked writes after the failover")
    wait_for(lambda: leader not in observer.nodes(), 30, "the old session gone")
    returned = make_node(shards=SHARDS, data_dir=cluster[leader].data_dir,
                         env=cluster_env(zk_connect, leader))
    nodes = {**cluster, leader: returned}
    wait_isr(nodes[state.leader], "ledger", 3, timeout_s=60)
    writer.stop()
    head = wait_caught_up(nodes[state.leader], "ledger")["hw"]
    for node in nodes.values():
        node.stop()
    found = copies(nodes, SHARDS, "ledger")
    assert found["a"] == found["b"] == found["c"], "the copies differ"
    copy = found[state.leader]
    assert max(copy) >= head
    for seq, number in writer.acked.items():               # 0 acked writes lost
        assert orjson.loads(copy[seq])["d"] == {"n": number}, seq
    assert len(writer.acked) >= 100
