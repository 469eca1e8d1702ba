"""Nodes started with TOPICS_ZK join a real ZooKeeper: each registers under its node id
with its advertised address, exactly one is the controller, the controller role moves when
its node is killed -9 (once ZooKeeper ends that node's session), a second node with a
taken id and a node that cannot reach ZooKeeper refuse to start with one clear line."""

import os
import threading

import pytest

from tools.testing.node_harness import wait_for
from tools.testing.zookeeper_server import free_port
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SESSION_MS = "1000"


def cluster_env(zk_connect: str, node_id: str) -> dict:
    return {"TOPICS_ZK": zk_connect, "TOPICS_NODE_ID": node_id,
            "TOPICS_ZK_SESSION_TIMEOUT_MS": SESSION_MS, "TOPICS_GATEWAY_WORKERS": "1"}


def test_three_nodes_register_and_one_controls(make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=1, env=cluster_env(zk_connect, nid)) for nid in "abc"}
    registered = wait_for(lambda: observer.nodes() if len(observer.nodes()) == 3 else None,
                          20, "three registrations")
    for nid, node in nodes.items():
        assert registered[nid]["advertise"] == "127.0.0.1"
        assert registered[nid]["http_port"] == node.http_port
        assert registered[nid]["zmq_port"] == node.ports["zmq"]
    first = wait_for(observer.controller, 20, "a controller")
    for nid, node in nodes.items():               # every node's GET /v0/cluster agrees
        view = wait_for(lambda: _cluster_view(node, 3), 20, f"{nid}'s view of three nodes")
        assert view["node_id"] == nid and view["controller"] == first
        assert view["session"] == "connected"
        assert view["nodes"][nid]["http_port"] == node.http_port
    nodes[first].kill_group()                     # kill -9 of the controller's whole node
    successor = wait_for(lambda: (c := observer.controller()) not in (None, first) and c,
                         30, "another controller")
    assert successor in set("abc") - {first}
    assert first not in observer.nodes()
    # The winner holds /controller first, then bumps the generation: wait for the bump.
    wait_for(lambda: int(observer.znodes.get("/topics/controller_epoch")[0]) == 2, 10,
             "the controller generation bumped")


def _cluster_view(node, count: int) -> dict | None:
    reply = node.http("GET", "/v0/cluster")
    assert reply.status == 200, reply.body
    view = reply.json()
    return view if len(view["nodes"]) == count and view["controller"] else None


def test_a_single_node_has_no_cluster_view(make_node):
    reply = make_node(shards=1).http("GET", "/v0/cluster")
    assert reply.status == 404 and reply.json()["error"]["code"] == "not_found"


def test_a_taken_node_id_or_an_absent_zookeeper_refuses_to_start(make_node, zk_connect,
                                                                  observer):
    make_node(shards=1, env=cluster_env(zk_connect, "twin"))
    second = make_node(shards=1, env=cluster_env(zk_connect, "twin"), start=False)
    with pytest.raises(AssertionError, match="exited with 2"):
        second.start(timeout_s=30)
    assert "registered by another live node" in second.log()
    assert "did not end within 1.5 s" in second.log()
    lonely = make_node(shards=1, env=cluster_env(f"127.0.0.1:{free_port()}", "x"),
                       start=False)
    with pytest.raises(AssertionError, match="exited with 2"):
        lonely.start(timeout_s=60)
    assert "no ZooKeeper at" in lonely.log() and "refused the connection" in lonely.log()


def test_a_node_waits_out_the_session_that_held_its_id(make_node, zk_connect):
    """As after a kill -9 and a quick restart: its id is still held by a session (here one
    of the test's) that ends while the node waits; it says so, and starts."""
    holder = MetadataStore(ZooKeeperZnodes(zk_connect, 2000), "back")
    holder.register({"advertise": "127.0.0.1"})
    node = make_node(shards=1, env=cluster_env(zk_connect, "back"), start=False)
    starting = threading.Thread(target=node.start, kwargs={"timeout_s": 60}, daemon=True)
    starting.start()
    wait_for(lambda: os.path.exists(node.log_path) and "event=node_id_held" in node.log(), 30,
             "the node waiting for its id")
    holder.znodes.close()                         # the old session ends
    starting.join(60)
    assert node.http("GET", "/v0/ready").status == 200
    assert "event=node_id_reclaimed node=back" in node.log()


def test_cluster_settings_are_checked(make_node):
    node = make_node(shards=1, env={"TOPICS_ZK": "127.0.0.1:1"}, start=False)
    with pytest.raises(AssertionError, match="exited with"):
        node.start(timeout_s=30)
    assert "TOPICS_ZK needs TOPICS_NODE_ID" in node.log()
