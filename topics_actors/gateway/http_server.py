"""The gateway's HTTP/1.1 server: connections parsed and answered on the gateway's own
event loop, and the top level of request handling.

Why in the loop: a server with threads of its own (granian, before) parses a request in one
thread and hands it to the loop's thread, then hands the response back; each hand-off wakes
a thread. On this 2-core machine those wake-ups were most of a request's latency (an empty
handler over one keep-alive connection: 88 us p50 behind granian, 16 us here, with `wrk
-c1`). Here the socket's bytes reach `data_received` on the loop, httptools (C, llhttp)
parses them in that call, the handler runs, and its response is written to the socket from
the same thread. A server-sent-event stream is a chunked response whose chunks go straight
to the socket, with the transport's flow control as its only buffer.

What the server does for the handlers: keep-alive and pipelining (answers in request
order), bodies by Content-Length or chunked, `Expect: 100-continue`, the body limit (413
without reading further, then close), 400 for what does not parse, an idle timeout, HEAD,
and the WebSocket upgrade (gateway/ws_transport.py). Handlers see only HttpRequest and
answer HttpResponse or HttpStream (gateway/http_message.py).

It is also the top level of request handling: an InvariantViolation (a bug) ends the
process, since a server that answered 500 would serve on with whatever broke.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

import httptools

from topics_actors.child_process import die_of_bug
from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError
from topics_actors.gateway.http_message import (
    HttpRequest, HttpStream, error_response, split_target,
)
from topics_actors.gateway.request_body import payload_too_large
from topics_actors.gateway.route_table import handler_of

if TYPE_CHECKING:     # imported on first use (see H2_PREFACE)
    from topics_actors.gateway.h2_session import H2Session
    from topics_actors.gateway.ws_transport import WsTransport

log = logging.getLogger(__name__)

BACKLOG = 1024
PIPELINE_MAX = 16                # requests of one connection waiting for their turn
HEADER_BYTES_MAX = 64 * 1024     # a request line and headers larger than this: 400
IDLE_TIMEOUT_S = 75.0            # a keep-alive connection with no request in progress
HEADER_TIMEOUT_S = 30.0          # a request whose headers have not all come
SWEEP_INTERVAL_S = 1.0
WRITE_BUFFER_HIGH = 256 * 1024   # per connection, before a stream waits for the socket
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# HTTP/2 with prior knowledge opens with this. h2_session and ws_transport (h2, websockets:
# 2.8 MB) are imported by the first connection that needs them, so that they stay out of the
# image every process of a node is forked from (supervisor/fork_server.py).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


def status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))


def head_bytes(status: int, headers: list[tuple[str, str]], extra: bytes) -> bytes:
    """A response's status line and headers, `extra` being the framing lines."""
    lines = [status_line(status)]
    lines += [name.encode("latin-1") + b": " + value.encode("latin-1") + b"\r\n"
              for name, value in headers]
    lines.append(extra + b"\r\n")
    return b"".join(lines)


class HttpServer:
    """Accepts on the inherited listening socket; `handle` answers requests (a GatewayCore),
    `websocket(request, upgrade)` serves upgrades."""

    def __init__(self, core, body_bytes_max: int,
                 die: Callable[[InvariantViolation], None] = die_of_bug):
        self.core = core
        self.body_bytes_max = body_bytes_max
        self.die = die
        self.connections: set[HttpConnection] = set()
        self.in_flight = 0               # requests being answered, streams and sockets too
        self.server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task | None = None

    async def start(self, listen_fd: int) -> None:
        sock = socket.socket(fileno=os.dup(listen_fd))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: HttpConnection(self), sock=sock,
                                               backlog=BACKLOG)
        self._sweeper = loop.create_task(self._sweep())

    def stop_accepting(self) -> None:
        if self.server is not None:
            self.server.close()

    def close_idle(self) -> None:
        """Close every connection with no request in progress (a stop's last step)."""
        for conn in list(self.connections):
            if conn.idle():
                conn.close()

    def close(self) -> None:
        self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close()

    async def _sweep(self) -> None:
        """Close keep-alive connections idle too long and requests whose headers stall."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            now = time.monotonic()
            for conn in list(self.connections):
                conn.expire(now)

    async def answer(self, request: HttpRequest):
        """The handler's answer; a bug ends the process here (None: `die` returned, which
        only a test's seam does; the connection then closes unanswered)."""
        try:
            return await self.core.handle(request)
        except AssertionError as bug:     # InvariantViolation, or a failed assert
            self.die(bug)
            return None

    def too_large(self, method: bytes, path: str):
        response = error_response(payload_too_large(self.body_bytes_max))
        self.core.requests.record(handler_of(method.decode("latin-1"), path),
                                  response.status, 0)
        return response


class _Parsed:
    """What the parser has gathered of the request being read."""
    __slots__ = ("url", "headers", "head_bytes", "body", "size", "refused", "begun_s")

    def __init__(self):
        self.url = b""
        self.headers: dict[str, str] = {}
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.size = 0
        self.refused = False         # answered already (413, 400): the rest is discarded
        self.begun_s = time.monotonic()


class HttpConnection(asyncio.Protocol):
    """One client connection: parse, queue, answer in order."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.parsed: _Parsed | None = None
        self.pending: collections.deque = collections.deque()
        self.runner: asyncio.Task | None = None
        self.streaming: asyncio.Task | None = None
        self.ws: WsTransport | None = None
        self.h2: H2Session | None = None
        self.sniff: bytes | None = b""   # the first bytes, until they tell HTTP/2 from 1.1
        self.closed = False
        self.reading = True
        self.refusing = False        # a 400 or 413 is queued: the connection ends after it
        self.last_s = time.monotonic()
        self._drained: asyncio.Future | None = None

    # --- the transport's callbacks -----------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        # The parser holds this connection's callbacks: without it, a closed connection
        # (its transport, its buffers) goes by reference counting, not by the collector's
        # rare passes (collector_policy.py). Nothing is parsed after the loss.
        self.parser = None
        if self.streaming is not None:
            self.streaming.cancel()          # the stream's generator frees what it holds
        if self.ws is not None:
            self.ws.lost()
        if self.h2 is not None:
            self.h2.lost()
        self._wake_writer()

    def data_received(self, data: bytes) -> None:
        self.last_s = time.monotonic()
        if self.ws is not None:
            self.ws.data_received(data)
            return
        if self.h2 is not None:
            self.h2.data_received(data)
            return
        if self.sniff is not None:
            data = self._sniff(data)
            if not data:
                return
        if self.refusing:
            return                   # nothing more of this connection is read
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade(data[upgrade.args[0]:])
        except httptools.HttpParserError:
            self._refuse("the request is not valid HTTP/1.1")

    def _sniff(self, data: bytes) -> bytes:
        """HTTP/2 with prior knowledge opens with its preface; anything else is HTTP/1.1.
        Returns the bytes for the HTTP/1.1 parser (none while undecided or for HTTP/2)."""
        data = self.sniff + data
        if len(data) < len(H2_PREFACE) and H2_PREFACE.startswith(data):
            self.sniff = data
            return b""
        self.sniff = None
        if data.startswith(H2_PREFACE):
            from topics_actors.gateway.h2_session import H2Session
            self.h2 = H2Session(self)
            self.h2.data_received(data)
            return b""
        return data

    def pause_writing(self) -> None:
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def writable(self) -> bool:
        """Open and not backed up: the socket takes more now."""
        return not self.closed and self._drained is None

    def ready(self) -> bool:
        """The stream's connection takes a chunk now (StreamSink)."""
        return self.writable() and self.streaming is not None

    def push(self, chunk: bytes) -> None:
        """One chunk of the stream, written now (StreamSink; after ready()). An empty one
        is not written: in chunked framing it would end the response."""
        if chunk:
            self.transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))

    async def drain(self) -> None:
        """Wait until the socket took the buffered bytes (or the client left)."""
        if self._drained is not None and not self.closed:
            await self._drained

    # --- the parser's callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.parsed = _Parsed()

    def on_url(self, url: bytes) -> None:
        self._count_head(url)
        self.parsed.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(value, len(name))
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self.parsed.headers
        headers[key] = headers[key] + ", " + text if key in headers else text

    def _count_head(self, piece: bytes, more: int = 0) -> None:
        parsed = self.parsed
        parsed.head_bytes += len(piece) + more
        if parsed.head_bytes > HEADER_BYTES_MAX and not parsed.refused:
            self._refuse("the request line and headers are too large")

    def on_headers_complete(self) -> None:
        parsed, limit = self.parsed, self.server.body_bytes_max
        if parsed.refused:
            return
        length = parsed.headers.get("content-length")
        if limit and length is not None and length.isdigit() and int(length) > limit:
            self._too_large()
        elif parsed.headers.get("expect", "").lower() == "100-continue" and self.idle(1):
            self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        parsed = self.parsed
        if parsed.refused:
            return
        parsed.size += len(body)
        limit = self.server.body_bytes_max
        if limit and parsed.size > limit:
            self._too_large()
        else:
            parsed.body.append(body)

    def on_message_complete(self) -> None:
        parsed, self.parsed = self.parsed, None
        if parsed.refused:
            return
        path, query = split_target(parsed.url)
        request = HttpRequest(self.parser.get_method().decode("latin-1"), path, query,
                              parsed.headers, b"".join(parsed.body))
        self._queue(("request", request, self.parser.should_keep_alive()))

    def _too_large(self) -> None:
        """413 at once (after the requests before it), then close: the body is not read."""
        parsed = self.parsed
        parsed.refused = True
        path, _ = split_target(parsed.url)
        self._queue(("error", self.server.too_large(self.parser.get_method(), path), False))
        self.refusing = True
        self._stop_reading()

    # --- answering, in order ---------------------------------------------------------------

    def _queue(self, item: tuple) -> None:
        self.pending.append(item)
        if len(self.pending) >= PIPELINE_MAX:
            self._stop_reading()
        if self.runner is None:
            self.runner = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        server = self.server
        try:
            while self.pending and not self.closed:
                kind, payload, keep = self.pending.popleft()
                if kind == "error":
                    self._write(payload, False, False)
                    break
                if kind == "upgrade":
                    await self._websocket(payload)
                    break
                server.in_flight += 1
                try:
                    response = await server.answer(payload)
                    if response is None:
                        self.close()
                        return
                    if isinstance(response, HttpStream):
                        keep = await send_chunked(self, response) and keep
                    else:
                        self._write(response, payload.method == "HEAD", keep)
                finally:
                    server.in_flight -= 1
                if not keep:
                    self.close()
                    return
                if not self.reading and not self.refusing and \
                        len(self.pending) < PIPELINE_MAX // 2:
                    self.reading = True
                    self.transport.resume_reading()
        finally:
            self.runner = None
            self.last_s = time.monotonic()

    def _write(self, response, head_only: bool, keep: bool) -> None:
        if self.closed:
            return
        body = response.body
        extra = b"content-length: %d\r\n" % len(body)
        if not keep:
            extra += b"connection: close\r\n"
        head = head_bytes(response.status, response.header_list(), extra)
        self.transport.write(head if head_only else head + body)
        if not keep:
            self.close()

    # --- WebSocket upgrades ------------------------------------------------------------------

    def _upgrade(self, rest: bytes) -> None:
        """The parser met an upgrade. A WebSocket's request (queued by on_message_complete)
        becomes an upgrade and every later byte belongs to the WebSocket; any other upgrade
        (h2c) is declined: the request is answered over HTTP/1.1 and parsing goes on."""
        if not self.pending or self.pending[-1][0] != "request":
            self._refuse("the upgrade request is not valid")
            return
        kind, request, keep = self.pending[-1]
        if "websocket" not in request.header("upgrade", "").lower():
            self.parser = httptools.HttpRequestParser(self)
            self.data_received(rest)
            return
        self.pending.pop()
        from topics_actors.gateway.ws_transport import WsTransport
        self.ws = WsTransport(self, request)
        self.ws.data_received(rest)
        self._queue(("upgrade", request, False))

    async def _websocket(self, request: HttpRequest) -> None:
        self.server.in_flight += 1
        try:
            await self.server.core.websocket(request, self.ws)
        except AssertionError as bug:     # InvariantViolation, or a failed assert
            self.server.die(bug)
        finally:
            self.server.in_flight -= 1
            self.close()

    # --- ending ------------------------------------------------------------------------------

    def _refuse(self, message: str) -> None:
        """400 for a request that cannot be parsed (after the answers of those before it),
        then close."""
        if self.parsed is not None:
            self.parsed.refused = True
        self._queue(("error", error_response(TopicsError(message, ErrorCode.INVALID_REQUEST)),
                     False))
        self.refusing = True
        self._stop_reading()

    def _stop_reading(self) -> None:
        if self.reading and self.transport is not None and not self.closed:
            self.reading = False
            self.transport.pause_reading()

    def idle(self, reading: int = 0) -> bool:
        """No request in progress; `reading`: that many being parsed are allowed."""
        if self.h2 is not None:
            return not self.h2.busy()
        return self.runner is None and not self.pending and \
            (self.parsed is None) + reading >= 1

    def expire(self, now: float) -> None:
        if self.ws is not None or self.closed:
            return
        if self.idle() and now - self.last_s > IDLE_TIMEOUT_S:
            self.close()
        elif self.parsed is not None and now - self.parsed.begun_s > HEADER_TIMEOUT_S \
                and self.runner is None:
            self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()


async def send_chunked(conn: HttpConnection, response: HttpStream) -> bool:
    """Send the status and headers, then each chunk as it comes (chunked), waiting for
    the socket when its buffer is full. True when the stream ended and the connection
    may carry another request."""
    chunks = response.chunks
    conn.transport.write(head_bytes(response.status, response.header_list(),
                                    b"transfer-encoding: chunked\r\n"))
    conn.streaming = asyncio.current_task()
    if response.attach is not None:
        response.attach(conn)
    try:
        async for chunk in chunks:
            if conn.closed:
                break
            conn.push(chunk)
            if conn._drained is not None:      # the socket's buffer is full
                await conn.drain()
    except asyncio.CancelledError:
        if not conn.closed:
            raise                            # cancelled for another reason: pass it on
        return False
    finally:
        conn.streaming = None
        if response.attach is not None:
            response.attach(None)
        await chunks.aclose()
    if conn.closed:
        return False
    conn.transport.write(b"0\r\n\r\n")
    return True
