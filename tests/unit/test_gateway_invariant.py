"""An InvariantViolation (a bug) ends the gateway process instead of becoming a 500:
GatewayCore lets it through (any other exception is still a 500), the HTTP server hands it
to its `die` seam without answering, and in a real gateway loop the process logs CRITICAL and
exits 70 (the supervisor restarts it). Also: /v0/health names the ZeroMQ front's port."""

import asyncio
import http.client
import socket
import subprocess
import sys

import orjson
import pytest

from topics_actors.errors import InvariantViolation
from topics_actors.gateway.gateway_core import GatewayCore
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import HttpRequest
from topics_actors.child_process import EXIT_BUG
from topics_actors.gateway.http_server import HttpServer

pytestmark = pytest.mark.timeout(30)


class BrokenEngine:
    def __init__(self, error: BaseException):
        self.error = error

    async def call(self, topic, msg, wait_ms=0):
        raise self.error

    async def drive(self, steps):     # router steps (a GET first settles routed reads)
        raise self.error

    async def topic_count(self, max_age_s):
        return 0


def core_with(error: BaseException, zmq_port: int = 0) -> GatewayCore:
    return GatewayCore(GatewaySettings(), BrokenEngine(error), 0, zmq_port=zmq_port)


def test_the_core_lets_an_invariant_violation_through():
    with pytest.raises(InvariantViolation, match="seq went backwards"):
        asyncio.run(core_with(InvariantViolation("seq went backwards")).handle(
            HttpRequest("GET", "/v0/topics/t")))


def test_any_other_exception_is_still_a_500():
    response = asyncio.run(core_with(RuntimeError("boom")).handle(
        HttpRequest("GET", "/v0/topics/t")))
    assert response.status == 500
    assert orjson.loads(response.body)["error"]["code"] == "internal"


def test_health_names_the_front_port():
    response = asyncio.run(core_with(RuntimeError(), zmq_port=4001).handle(
        HttpRequest("GET", "/v0/health")))
    body = orjson.loads(response.body)
    assert response.status == 200 and body["zmq_port"] == 4001 and body["status"] == "ok"


def test_the_server_dies_of_a_bug_without_answering():
    """The seam `die` gets the bug; the client gets no answer (its connection closes); any
    other exception is still a 500."""
    async def exchange(error: BaseException) -> tuple[list, bytes]:
        died = []
        server = HttpServer(core_with(error), 0, die=died.append)
        listener = socket.create_server(("127.0.0.1", 0))
        await server.start(listener.fileno())
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"GET /v0/topics/t HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(4096), 10)
        writer.close()
        server.close()
        listener.close()
        return died, answer
    died, answer = asyncio.run(exchange(InvariantViolation("x")))
    assert [type(bug) for bug in died] == [InvariantViolation] and answer == b""
    died, answer = asyncio.run(exchange(RuntimeError()))
    assert died == [] and answer.startswith(b"HTTP/1.1 500 ")


GATEWAY = """
import asyncio, logging, socket, sys
from tests.unit.test_gateway_invariant import core_with
from topics_actors.errors import InvariantViolation
from topics_actors.gateway.http_server import HttpServer
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
sock = socket.create_server(("127.0.0.1", 0))
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)
server = HttpServer(core_with(InvariantViolation("seq went backwards"), zmq_port=1), 0)
loop.run_until_complete(server.start(sock.fileno()))
print(sock.getsockname()[1], flush=True)
loop.run_forever()
"""


def get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_a_real_gateway_worker_exits_on_a_bug():
    proc = subprocess.Popen([sys.executable, "-c", GATEWAY], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        port = int(proc.stdout.readline())
        assert get(port, "/v0/health") == 200         # it serves
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            get(port, "/v0/topics/t")                       # the bug: no answer at all
        assert proc.wait(10) == EXIT_BUG
    finally:
        proc.kill()
        _, stderr = proc.communicate()
    assert b"CRITICAL event=invariant_violation" in stderr
    assert b"InvariantViolation: seq went backwards" in stderr


def test_a_bug_in_a_background_task_ends_the_process():
    """A work stream's release runs in the background once its client left: a bug met
    there (here: in the claim it waited for) ends the process too; a claim that merely
    failed leaves nothing to give back, and nothing dies."""
    from topics_actors.errors import ErrorCode, TopicsError
    from topics_actors.gateway.watch_service import in_background
    from topics_actors.gateway.work_stream import WorkPlan
    died = []

    async def scenario() -> set:
        core = core_with(TopicsError("gone", ErrorCode.NOT_FOUND))
        loop, plan = asyncio.get_running_loop(), WorkPlan("q", "n", 1, None)
        for error in (InvariantViolation("a lease handed out twice"),
                      TopicsError("gone", ErrorCode.NOT_FOUND)):
            claiming = loop.create_future()
            claiming.set_exception(error)
            task = in_background(core.work._give_back(plan, {}, claiming), core.watch.tasks,
                                 died.append)
            await asyncio.wait([task])
            await asyncio.sleep(0)
        return core.watch.tasks

    assert asyncio.run(scenario()) == set()
    assert [str(bug) for bug in died] == ["a lease handed out twice"]
