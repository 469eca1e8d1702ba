"""The gateway's HTTP/1.1 server (gateway/http_server.py) on a real socket, with a stand-in
core: framing and connection handling, which the black-box tests in tests/http only reach
through well-behaved clients.

Method: one server per test on an ephemeral loopback port, in the test's own event loop;
raw bytes in, raw bytes out, so each case is exactly the wire it names.
"""

import asyncio
import gc
import socket
import weakref

import pytest

from topics_actors.gateway import http_server
from topics_actors.gateway.http_message import HttpResponse, HttpStream, json_response
from topics_actors.gateway.http_server import HttpServer

pytestmark = pytest.mark.timeout(30)


class Stats:
    def __init__(self):
        self.recorded = []

    def record(self, handler, status, ns):
        self.recorded.append((handler, status))


class EchoCore:
    """Answers every request with what it saw; `/slow/<ms>` waits first; `/stream/<n>`
    streams n chunks and records that its generator was closed."""

    def __init__(self):
        self.requests = Stats()
        self.seen = []
        self.stream_closed = asyncio.Event()

    async def handle(self, request):
        self.seen.append(request)
        if request.path.startswith("/slow/"):
            await asyncio.sleep(int(request.path[6:]) / 1000)
        if request.path.startswith("/stream/"):
            return HttpStream(200, self._chunks(int(request.path[8:])), "text/event-stream")
        return json_response(200, {"method": request.method, "path": request.path,
                                   "query": request.query, "body": request.body.decode(),
                                   "te": request.header("transfer-encoding")})

    async def _chunks(self, count):
        try:
            for i in range(count):
                yield b"data: %d\n\n" % i
                yield b""                    # nothing to say: must not end the response
            if count == 0:
                await asyncio.Event().wait()          # forever, until the client leaves
        finally:
            self.stream_closed.set()

    async def websocket(self, request, upgrade):
        upgrade.reject(404)


async def serve(core, body_max: int = 1000):
    listener = socket.create_server(("127.0.0.1", 0))
    server = HttpServer(core, body_max)
    await server.start(listener.fileno())
    return server, listener


async def exchange(data: bytes, core=None, body_max: int = 1000, until: bytes = b"",
                   read_s: float = 5) -> bytes:
    """Send `data` on one connection; read until `until` is in the answer or it closes."""
    core = core or EchoCore()
    server, listener = await serve(core, body_max)
    reader, writer = await asyncio.open_connection(*listener.getsockname())
    writer.write(data)
    got = b""
    try:
        while not (until and until in got):
            chunk = await asyncio.wait_for(reader.read(65536), read_s)
            if not chunk:
                break
            got += chunk
    finally:
        writer.close()
        server.close()
        listener.close()
    return got


def run(coro):
    return asyncio.run(coro)


def test_keep_alive_answers_pipelined_requests_in_order():
    data = (b"GET /slow/50 HTTP/1.1\r\nhost: x\r\n\r\n"
            b"POST /a?x=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello"
            b"GET /b%20c HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    got = run(exchange(data))
    answers = got.split(b"HTTP/1.1 200 OK")[1:]
    assert len(answers) == 3
    assert b'"path":"/slow/50"' in answers[0]
    assert b'"path":"/a","query":"x=1","body":"hello"' in answers[1]
    assert b'"path":"/b c"' in answers[2] and b"connection: close" in answers[2]


def test_a_chunked_body_is_joined():
    data = (b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
            b"connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert b'"body":"abcde"' in run(exchange(data))


def test_expect_continue_gets_its_interim_answer():
    async def go():
        server, listener = await serve(EchoCore())
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"POST /e HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n"
                     b"expect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.write(b"abc")
        final = await asyncio.wait_for(reader.readuntil(b'"te":null}'), 5)
        writer.close()
        server.close()
        listener.close()
        return interim, final
    interim, final = run(go())
    assert interim == http_server.CONTINUE and b'"body":"abc"' in final


def test_a_body_over_the_limit_is_413_at_once_and_the_connection_closes():
    core = EchoCore()
    got = run(exchange(b"POST /t HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n", core))
    assert got.startswith(b"HTTP/1.1 413 ") and b"payload_too_large" in got
    assert core.seen == [] and core.requests.recorded == [("unmatched", 413)]
    chunked = (b"POST /v0/topics/t HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
               + b"400\r\n" + b"x" * 1024 + b"\r\n")
    core = EchoCore()
    got = run(exchange(chunked, core))
    assert got.startswith(b"HTTP/1.1 413 ") and core.requests.recorded == [("append", 413)]


def test_what_does_not_parse_is_400_and_closes():
    for data in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nbad header\r\n\r\n",
                 b"GET /" + b"a" * (http_server.HEADER_BYTES_MAX + 10) + b" HTTP/1.1\r\n\r\n"):
        got = run(exchange(data))
        assert got.startswith(b"HTTP/1.1 400 ") and b"invalid_request" in got, got[:200]
        assert b"connection: close" in got


def test_head_has_the_length_but_no_body():
    got = run(exchange(b"HEAD /h HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"))
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"content-length: " in head and body == b""


def test_http_1_0_closes_after_the_answer():
    got = run(exchange(b"GET /old HTTP/1.0\r\n\r\n"))
    assert got.startswith(b"HTTP/1.1 200 ") and b"connection: close" in got


def test_a_stream_is_chunked_and_ends_with_the_last_chunk():
    got = run(exchange(b"GET /stream/2 HTTP/1.1\r\nhost: x\r\n\r\n", until=b"0\r\n\r\n"))
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body == b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_client_that_leaves_closes_the_stream():
    async def go():
        core = EchoCore()
        server, listener = await serve(core)
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        writer.write(b"GET /stream/0 HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert server.in_flight == 1
        writer.close()
        await asyncio.wait_for(core.stream_closed.wait(), 5)
        await asyncio.sleep(0)
        in_flight = server.in_flight
        server.close()
        listener.close()
        return in_flight
    assert run(go()) == 0


def test_an_upgrade_that_is_not_a_websocket_is_answered_over_http():
    got = run(exchange(b"GET /u HTTP/1.1\r\nhost: x\r\nconnection: upgrade, close\r\n"
                       b"upgrade: h2c\r\n\r\n"))
    assert got.startswith(b"HTTP/1.1 200 ") and b'"path":"/u"' in got


def test_an_idle_connection_is_closed(monkeypatch):
    monkeypatch.setattr(http_server, "IDLE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(http_server, "SWEEP_INTERVAL_S", 0.05)
    got = run(exchange(b"GET /i HTTP/1.1\r\nhost: x\r\n\r\n"))     # keep-alive, then silence
    assert got.startswith(b"HTTP/1.1 200 ") and got.count(b"HTTP/1.1") == 1


def test_responses_carry_the_handlers_headers():
    class Core(EchoCore):
        async def handle(self, request):
            return HttpResponse(429, b"{}", headers=(("retry-after", "1"),))
    got = run(exchange(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", Core()))
    assert got.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
    assert b"retry-after: 1\r\n" in got and b"content-type: application/json\r\n" in got


async def h2_exchange(requests: list[tuple[list, bytes]], core=None) -> dict:
    """HTTP/2 with prior knowledge: send each (headers, body) on its own stream; returns
    {stream_id: (response headers, body)} once every stream has ended."""
    import h2.config
    import h2.connection
    import h2.events
    server, listener = await serve(core or EchoCore())
    reader, writer = await asyncio.open_connection(*listener.getsockname())
    client = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8"))
    client.initiate_connection()
    answers = {}
    for i, (headers, body) in enumerate(requests):
        stream_id = 2 * i + 1
        client.send_headers(stream_id, [(":scheme", "http"), (":authority", "h"), *headers],
                            end_stream=not body)
        if body:
            client.send_data(stream_id, body, end_stream=True)
        answers[stream_id] = [None, b"", False]
    writer.write(client.data_to_send())
    try:
        while not all(done for _, _, done in answers.values()):
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data, "the server closed the connection"
            for event in client.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    answers[event.stream_id][0] = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    answers[event.stream_id][1] += event.data
                    client.acknowledge_received_data(event.flow_controlled_length,
                                                     event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    answers[event.stream_id][2] = True
            writer.write(client.data_to_send())
    finally:
        writer.close()
        server.close()
        listener.close()
    return {k: (v[0], v[1]) for k, v in answers.items()}


def test_h2c_with_prior_knowledge_serves_requests_and_streams():
    answers = run(h2_exchange([
        ([(":method", "POST"), (":path", "/x%20y?a=1")], b"hello"),
        ([(":method", "GET"), (":path", "/stream/2")], b""),
    ]))
    headers, body = answers[1]
    assert headers[":status"] == "200" and headers["content-length"] == str(len(body))
    assert b'"method":"POST","path":"/x y","query":"a=1","body":"hello"' in body
    headers, body = answers[3]
    assert headers["content-type"] == "text/event-stream" and body == b"data: 0\n\ndata: 1\n\n"


def test_h2c_sends_a_large_body_as_the_windows_open():
    class Core(EchoCore):
        async def handle(self, request):
            return HttpResponse(200, b"z" * 300_000)
    answers = run(h2_exchange([([(":method", "GET"), (":path", "/big")], b"")], Core()))
    assert answers[1][1] == b"z" * 300_000         # beyond the 65535-byte first window


def test_h2c_refuses_a_body_over_the_limit():
    core = EchoCore()
    answers = run(h2_exchange([([(":method", "POST"), (":path", "/v0/topics/t")],
                                b"x" * 5000)], core))
    assert answers[1][0][":status"] == "413" and core.seen == []


def test_a_closed_connection_is_freed_without_the_cycle_collector():
    """A connection the client closed goes as soon as nothing uses it. Its request parser
    holds its callbacks (bound methods of the connection): unbroken, every closed
    connection waited, with its transport and buffers, for a pass of the collector, which
    the gateway runs rarely (collector_policy.py); about 1500 of them were waiting in a
    gateway under the soak's watchers."""
    async def go():
        core = EchoCore()
        server, listener = await serve(core)
        refs = []
        for path in (b"/a", b"/stream/0"):
            reader, writer = await asyncio.open_connection(*listener.getsockname())
            writer.write(b"GET %s HTTP/1.1\r\nhost: x\r\n\r\n" % path)
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            refs += [weakref.ref(c) for c in server.connections]
            writer.close()
            for _ in range(200):
                if all(ref() is None for ref in refs):
                    break
                await asyncio.sleep(0.01)
        server.close()
        listener.close()
        return refs, core.stream_closed.is_set()
    gc.collect()
    gc.disable()
    try:
        refs, stream_closed = run(go())
        assert len(refs) == 2 and stream_closed
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()
