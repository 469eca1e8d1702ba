"""Gateway processes under the supervisor: several workers share the port, a killed gateway
is restarted while the port keeps answering, /v0/ready says 503 while shards replay, and
the bind rules (loopback by default; non-loopback needs keys or an explicit opt-out)."""

import os
import signal

import pytest
import zmq

from tests.support import wait_for

pytestmark = pytest.mark.timeout(120)


def gateways(node) -> list[dict]:
    return [p for p in node.status()["processes"] if p["role"] == "gateway"]


def test_two_workers_share_the_port_and_a_killed_one_comes_back(make_node):
    node = make_node(env={"TOPICS_GATEWAY_WORKERS": "2"})
    ready = wait_for(lambda: (lambda g: g if len(g) == 2 and all(
        p["state"] == "ready" for p in g) else None)(gateways(node)), 30, "two gateways")
    victim = ready[0]
    os.kill(victim["pid"], signal.SIGKILL)
    for i in range(50):      # the other worker (and the kept socket's backlog) answers
        reply = node.http("POST", "/v0/topics/gw1", {"records": [{"data": i}]})
        assert reply.status in (200, 201), reply.body
    wait_for(lambda: any(p["index"] == victim["index"] and p["state"] == "ready"
                         and p["pid"] != victim["pid"] for p in gateways(node)), 30,
             "the gateway's restart")
    assert node.http("GET", "/v0/topics/gw1").json()["head_seq"] == 50


def test_no_gateway_workers_means_no_http(make_node):
    node = make_node(env={"TOPICS_GATEWAY_WORKERS": "0"})
    assert gateways(node) == []
    assert node.client().append("z", [{"data": 1}])["seqs"] == [1]


def test_ready_is_503_while_a_shard_replays(make_node, data_dir):
    node = make_node(shards=1, data_dir=data_dir)
    for i in range(20):
        node.http("POST", "/v0/topics/replayed", {"records": [{"data": i}]})
    node.stop()
    node = make_node(shards=1, data_dir=data_dir, start=False,
                     env={"TOPICS_FAILPOINTS": "recovery::mid_replay=sleep:1500"})
    node.start(wait_ready=False)
    replying = wait_for(lambda: (lambda r: r if r.status == 503 else None)(
        node.http("GET", "/v0/ready")), 30, "a 503 from /v0/ready during replay")
    error = replying.json()["error"]
    assert error["code"] == "not_ready" and 0.0 <= error["detail"]["replay_progress"] <= 1.0
    assert replying.headers["retry-after"] == "1"
    assert node.http("GET", "/healthz").status == 200
    wait_for(lambda: node.http("GET", "/readyz").status == 200, 30, "readiness")
    assert node.http("GET", "/v0/topics/replayed").json()["head_seq"] == 20


def test_a_wildcard_bind_needs_keys_or_the_opt_out(make_node, tmp_path):
    env = {"TOPICS_HOST": "0.0.0.0", "TOPICS_ALLOW_INSECURE_NO_AUTH": ""}
    with pytest.raises(AssertionError, match="exited with 1"):
        make_node(env=env)
    with pytest.raises(AssertionError, match="exited with 2"):   # HTTP keys, no client keys
        make_node(env={**env, "TOPICS_API_KEYS": "wide-key"})
    public, secret = zmq.curve_keypair()
    data_dir = str(tmp_path / "keyed")
    keyed = make_node(data_dir=data_dir, env={**env, "TOPICS_API_KEYS": "wide-key",
                                              "TOPICS_ZMQ_CLIENT_KEYS": public.decode()},
                      client_options={"curve_public_key": public, "curve_secret_key": secret,
                                      "curve_server_key": os.path.join(data_dir, "curve",
                                                                       "server.public")})
    assert keyed.http("GET", "/v0/topics").status == 401
    assert keyed.http("GET", "/v0/topics",
                      headers={"Authorization": "Bearer wide-key"}).status == 200
    keyed.stop()
    open_node = make_node(env={**env, "TOPICS_ALLOW_INSECURE_NO_AUTH": "1"})
    assert open_node.http("GET", "/v0/topics").status == 200
