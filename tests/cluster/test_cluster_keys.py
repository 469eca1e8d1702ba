"""A cluster whose nodes serve CURVE (TOPICS_ZMQ_CLIENT_KEYS): each node registers the key
it serves under; the others' shards fetch from it, and their gateways forward to it, under
their own node keys, which it admits as peers; a client following a topic's leader is told
the key that leader serves under (docs/CLUSTER.md, security). Three nodes on a real
ZooKeeper."""

import os

import pytest
import zmq

from tools.testing.cluster_harness import cluster_env, converged, wait_caught_up, wait_isr
from tools.testing.node_harness import wait_for
from topics_actors.client import Client, TopicsError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SHARDS = 2
CLIENT, STRANGER = zmq.curve_keypair(), zmq.curve_keypair()


def _creds(data_dir: str, pair) -> dict:
    return {"curve_server_key": os.path.join(data_dir, "curve", "server.public"),
            "curve_public_key": pair[0], "curve_secret_key": pair[1]}


def test_nodes_serving_curve_replicate_to_each_other(make_node, zk_connect, observer,
                                                     tmp_path):
    nodes = {}
    for nid in "abc":
        data_dir = str(tmp_path / f"keyed-{nid}")
        nodes[nid] = make_node(shards=SHARDS, data_dir=data_dir, env=cluster_env(
            zk_connect, nid, TOPICS_ZMQ_CLIENT_KEYS=CLIENT[0].decode()),
            client_options=_creds(data_dir, CLIENT))
    registered = wait_for(lambda: (n := observer.nodes()) and len(n) == 3 and all(
        i.get("shards") for i in n.values()) and n, 30, "three registrations")
    keys = {nid: info["curve_public"] for nid, info in registered.items()}
    for nid, node in nodes.items():
        with open(os.path.join(node.data_dir, "curve", "server.public")) as handle:
            assert keys[nid] == handle.read().strip()
    assert len(set(keys.values())) == 3
    nodes["a"].client().put_topic("secure", replication_factor=3, durability="fsync")
    leader = wait_for(lambda: observer.read("secure").state.leader, 30, "a leader")
    wait_isr(nodes[leader], "secure", 3)
    other = next(n for n in "abc" if n != leader)
    writer = nodes[other].client()                 # follows the leader, under its key
    acked = [writer.append("secure", [{"data": n}], acks="all")["seqs"][0] for n in range(30)]
    forwarded = nodes[other].http("POST", "/v0/topics/secure", {"records": [{"data": 30}]})
    assert forwarded.status == 200, forwarded.body  # the gateway, under its node's key
    acked.append(forwarded.json()["seqs"][0])
    assert acked == list(range(1, 32))
    shard_endpoint = registered[leader]["shards"][0]
    with Client(shard_endpoint, request_timeout_ms=2000, retry_deadline_ms=2000,
                route=False, **_creds(nodes[leader].data_dir, STRANGER)) as stranger:
        with pytest.raises(TopicsError) as refused:
            stranger.status()
        assert refused.value.code.wire == "unauthorized"
    wait_caught_up(nodes[leader], "secure")
    compared = nodes[other].http("GET", "/v0/topics/secure/checksum").json()  # under CURVE
    assert compared["agree"] and len(compared["copies"]) == 3, compared
    copy = converged(nodes, SHARDS, "secure")
    assert sorted(copy) == acked
