"""Finding the ZeroMQ front from an HTTP URL, against a small HTTP server in a thread:
ZeroMQ endpoints pass through, the health probe's zmq_port becomes tcp://<host>:<port>, a
key is sent when given and an error envelope becomes its TopicsError, a health without a
port is refused, and a node that does not answer fails within the timeout."""

import http.server
import socket
import threading
import time

import orjson
import pytest

from topics_actors.client import Client
from topics_actors.client.front_discovery import front_endpoint
from topics_actors.errors import ErrorCode, TopicsError

pytestmark = pytest.mark.timeout(30)


class Health(http.server.BaseHTTPRequestHandler):
    answers: dict = {}        # path -> (status, body); set per server
    seen: list = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.answers.get(self.path, (404, {"error": {"code": "not_found",
                                                                   "message": "no"}}))
        raw = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("H", (Health,), {"answers": {}, "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def url(httpd, path: str = "") -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}{path}"


def test_zeromq_endpoints_pass_through():
    for endpoint in ("tcp://127.0.0.1:4001", "ipc:///tmp/x.sock", "tcp://host:1"):
        assert front_endpoint(endpoint, 100) == endpoint


def test_the_health_probe_names_the_front(server):
    httpd, handler = server
    handler.answers["/v0/health"] = (200, {"status": "ok", "zmq_port": 4567})
    handler.answers["/base/v0/health"] = (200, {"status": "ok", "zmq_port": 4568})
    assert front_endpoint(url(httpd), 2_000) == "tcp://127.0.0.1:4567"
    assert front_endpoint(url(httpd, "/"), 2_000) == "tcp://127.0.0.1:4567"
    assert front_endpoint(url(httpd, "/base/"), 2_000, api_key="k") == "tcp://127.0.0.1:4568"
    assert handler.seen[-1] == ("/base/v0/health", "Bearer k")
    with Client(url(httpd), request_timeout_ms=2_000) as client:
        assert client.endpoint == "tcp://127.0.0.1:4567"


def test_an_error_envelope_becomes_its_error(server):
    httpd, handler = server
    handler.answers["/v0/health"] = (401, {"error": {"code": "unauthorized", "message": "key"}})
    with pytest.raises(TopicsError) as caught:
        front_endpoint(url(httpd), 2_000)
    assert caught.value.code == ErrorCode.UNAUTHORIZED


def test_a_health_without_a_port_is_refused(server):
    httpd, handler = server
    handler.answers["/v0/health"] = (200, {"status": "ok", "version": "0.1.0"})
    with pytest.raises(TopicsError, match="zmq_port"):
        front_endpoint(url(httpd), 2_000)


def test_a_node_that_does_not_answer_fails_within_the_timeout():
    with socket.create_server(("127.0.0.1", 0)) as mute:     # accepts (backlog), never answers
        started = time.monotonic()
        with pytest.raises(TopicsError) as caught:
            front_endpoint(f"http://127.0.0.1:{mute.getsockname()[1]}", 300)
        assert time.monotonic() - started < 2
    assert caught.value.code == ErrorCode.NOT_READY
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    with pytest.raises(TopicsError):
        front_endpoint(f"http://127.0.0.1:{port}", 300)
