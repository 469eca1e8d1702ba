"""Two nodes on one machine, configured with nothing but TOPICS_HOST, TOPICS_PORT and
TOPICS_DATA_DIR (every other TOPICS_* variable removed), both serve fully: each front
follows its HTTP port (+1), is published in /v0/health, and each node's HTTP API and
ZeroMQ front reach its own data. Clients built from the HTTP URL find the front.

Method: ports P for which P and P+1 were both free (bound, then released); two supervisors
in their own process groups; teardown stops both and checks that no process is left."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from tests.support import alive, http_call, wait_for
from topics_actors.client import AsyncClient, Client

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def free_port_pair(taken: set[int]) -> int:
    """A port P such that P and P + 1 were both free, and neither is in or next to `taken`."""
    for _ in range(200):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port >= 65535 or {port - 1, port, port + 1} & taken:
                continue
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise AssertionError("no pair of free ports")


class BareNode:
    """`topics serve` with the three variables only."""

    def __init__(self, base, port: int, **extra_env):
        self.port, self.log_path = port, base / f"node-{port}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICS_")}
        env.update(TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(port),
                   TOPICS_DATA_DIR=str(base / f"data-{port}"))
        env.update(extra_env)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "serve"],
                                         env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def health(self):
        try:
            reply = http_call(self.port, "GET", "/v0/health", timeout_s=2)
        except OSError:
            return None
        return reply.json() if reply.status == 200 else None

    def wait_ready(self) -> dict:
        def ready():
            assert self.proc.poll() is None, self.log_path.read_text()
            return http_call(self.port, "GET", "/v0/ready").status == 200 and self.health()
        return wait_for(lambda: self.health() and ready(), 60, f"node {self.port}")

    def stop(self) -> list[int]:
        try:
            pids = [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            pids = []
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        return pids


@pytest.fixture
def start_nodes(tmp_path):
    """start_nodes(n): n nodes on port pairs picked apart; all stopped at teardown."""
    nodes = []

    def start(count: int) -> list[BareNode]:
        for _ in range(count):
            taken = {port for node in nodes for port in (node.port, node.port + 1)}
            nodes.append(BareNode(tmp_path, free_port_pair(taken)))
        return nodes
    yield start
    left = []
    for node in nodes:
        left += node.stop()
    assert not alive(left), "a node left processes behind"
    assert [node.proc.returncode for node in nodes] == [0] * len(nodes)


def test_two_nodes_with_only_their_http_ports_apart_both_serve(start_nodes):
    two_nodes = start_nodes(2)
    for node in two_nodes:
        assert node.wait_ready()["zmq_port"] == node.port + 1
    for node in two_nodes:
        body = {"records": [{"data": {"node": node.port}}]}
        assert http_call(node.port, "POST", "/v0/topics/same", body).status == 201
        with Client(f"http://127.0.0.1:{node.port}", request_timeout_ms=5_000) as client:
            assert client.endpoint == f"tcp://127.0.0.1:{node.port + 1}"
            assert client.append("same", [{"data": {"zmq": node.port}}])["seqs"] == [2]
            records = client.diff("same")["records"]
        assert [r["data"] for r in records] == [{"node": node.port}, {"zmq": node.port}]
        reply = http_call(node.port, "POST", "/v0/topics/same/diff", {"from_seq": 0})
        assert [r["data"] for r in reply.json()["records"]] == [r["data"] for r in records]
    for node in two_nodes:
        assert "Address already in use" not in node.log_path.read_text()


def test_the_async_client_finds_the_front_from_the_http_url(start_nodes):
    [node] = start_nodes(1)
    node.wait_ready()

    async def use() -> dict:
        async with AsyncClient(f"http://127.0.0.1:{node.port}",
                               request_timeout_ms=5_000) as client:
            assert client.endpoint == f"tcp://127.0.0.1:{node.port + 1}"
            await client.append("async", [{"data": 1}, {"data": 2}])
            return await client.get_topic("async")
    assert asyncio.run(use())["head_seq"] == 2


def test_a_taken_http_port_plus_one_moves_the_front_and_publishes_it(tmp_path):
    """TOPICS_ZMQ_PORT unset and HTTP port + 1 held by a stranger: the node binds another
    port and says which in health, the log line and the port file; set and taken, it
    refuses (tests/integration/test_start_refused.py)."""
    port = free_port_pair(set())
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", port + 1))
        stranger.listen()
        node = BareNode(tmp_path, port, TOPICS_PORT_FILE=str(tmp_path / "ports.json"))
        try:
            zmq_port = node.wait_ready()["zmq_port"]
            assert zmq_port not in (port, port + 1)
            log = node.log_path.read_text()
            assert f"event=zmq_port_fallback wanted={port + 1}" in log
            assert f"event=listening zmq=tcp://127.0.0.1:{zmq_port} http_port={port}" in log
            assert json.loads((tmp_path / "ports.json").read_text()) == {
                "http": port, "zmq": zmq_port}
            with Client(f"http://127.0.0.1:{port}", request_timeout_ms=5_000) as client:
                assert client.endpoint == f"tcp://127.0.0.1:{zmq_port}"
                assert client.append("moved", [{"data": 1}])["seqs"] == [1]
        finally:
            assert not alive(node.stop())
        assert node.proc.returncode == 0


def test_topics_host_may_carry_the_port_as_the_original_takes_it(tmp_path):
    port = free_port_pair(set())
    node = BareNode(tmp_path, port, TOPICS_HOST=f"127.0.0.1:{port}", TOPICS_PORT="1")
    try:
        assert node.wait_ready()["zmq_port"] == port + 1
    finally:
        assert not alive(node.stop())
