"""The thin RSGI adapter between granian and GatewayCore, and the granian worker that
serves an inherited listening socket.

The supervisor binds the HTTP socket once and passes its descriptor to every gateway
process, which all accept on it: the port exists before the first gateway starts (so the
port file is exact, even for port 0) and stays bound while a gateway restarts. granian's
RSGIWorker is driven the way its own embedded server drives it (granian 2.8); this module
is the only one that imports granian.

It is also the top level of request handling, where an InvariantViolation (a bug) ends the
process: granian would turn the exception into a 500 and serve on with whatever broke.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import NoReturn

from granian._futures import _future_watcher_wrapper, _new_cbscheduler
from granian._granian import (
    RSGIProtocolClosed, RSGIProtocolError, RSGIWorker, SocketHolder, WorkerSignal,
)

from topics_actors.errors import InvariantViolation
from topics_actors.gateway.gateway_core import GatewayCore
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, HttpStream, error_response,
)
from topics_actors.gateway.request_body import payload_too_large
from topics_actors.gateway.route_table import handler_of
from topics_actors.gateway.ws_connection import ChannelClosed

log = logging.getLogger(__name__)

BACKLOG = 1024
BACKPRESSURE = 1024          # requests one gateway process works on at once
BLOCKING_THREADS_MAX = 512
_SSL_OFF = (False, None, None, None, "tls1.3", None, [], False)
EXIT_BUG = 70                # EX_SOFTWARE; the supervisor restarts the gateway
WS_BINARY, WS_TEXT = 1, 2    # RSGI websocket message kinds (0: closed by the client)
WS_CLOSE_NORMAL = 1000
WEBSOCKETS = True            # upgrades reach __rsgi__ with scope.proto == "ws"


def die_of_bug(bug: InvariantViolation) -> NoReturn:
    """End the process at once. Not SystemExit: granian catches whatever a request raises.
    The gateway holds no topic state, so only the requests in flight are lost (their
    clients see the connection close, as when a gateway is killed)."""
    log.critical("event=invariant_violation pid=%d exit_code=%d", os.getpid(), EXIT_BUG,
                 exc_info=bug)
    logging.shutdown()
    os._exit(EXIT_BUG)


class RsgiApp:
    """An RSGI application: scope + protocol in, one buffered response out."""

    def __init__(self, core: GatewayCore, body_bytes_max: int,
                 die: Callable[[InvariantViolation], None] = die_of_bug):
        self.core = core
        self.body_bytes_max = body_bytes_max
        self.die = die
        self.in_flight = 0

    async def _body(self, scope, proto) -> bytes | None:
        """The request body, or None when it exceeds the limit (nothing more is read)."""
        limit = self.body_bytes_max
        length = scope.headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = -1
            if limit and declared > limit:
                return None
            if declared >= 0:
                body = await proto()
                return None if limit and len(body) > limit else body
        chunks, size = [], 0
        async for chunk in proto:
            size += len(chunk)
            if limit and size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def __rsgi__(self, scope, proto) -> None:
        if scope.proto == "ws":
            await self._websocket(scope, proto)
            return
        if scope.proto != "http":
            return
        self.in_flight += 1
        try:
            body = await self._body(scope, proto)
            if body is None:
                response = error_response(payload_too_large(self.body_bytes_max))
                self.core.requests.record(handler_of(scope.method, scope.path),
                                          response.status, 0)
            else:
                response = await self.core.handle(HttpRequest(
                    scope.method, scope.path, scope.query_string, scope.headers, body))
            if isinstance(response, HttpStream):
                await _stream(proto, response)
            else:
                _send(proto, response)
        except InvariantViolation as bug:
            self.die(bug)
        finally:
            self.in_flight -= 1

    async def _websocket(self, scope, proto) -> None:
        """An upgrade request; counted in flight while its socket is open, so that the
        gateway's stop waits for the socket's last frame."""
        self.in_flight += 1
        try:
            await self.core.websocket(HttpRequest(scope.method, scope.path, scope.query_string,
                                                  scope.headers), RsgiWebsocket(proto))
        except InvariantViolation as bug:
            self.die(bug)
        finally:
            self.in_flight -= 1


class RsgiWebsocket:
    """granian's websocket protocol as the gateway's upgrade and WsChannel
    (gateway/ws_connection.py): reject with a bare HTTP status, or accept, then receive
    and send text; the socket closes when served."""

    def __init__(self, proto):
        self.proto = proto
        self.transport = None

    def reject(self, status: int) -> None:
        self.proto.close(status)

    async def accept(self) -> "RsgiWebsocket":
        try:
            self.transport = await self.proto.accept()
        except (RSGIProtocolClosed, RSGIProtocolError):
            raise ChannelClosed() from None       # the client left during the handshake
        return self

    async def receive(self) -> tuple[str | None, bool]:
        try:
            message = await self.transport.receive()
        except (RSGIProtocolClosed, RSGIProtocolError):
            return None, False
        if message.kind == WS_TEXT:
            return message.data, False
        return None, message.kind == WS_BINARY       # else the client closed

    async def send(self, text: str) -> None:
        try:
            await self.transport.send_str(text)
        except (RSGIProtocolClosed, RSGIProtocolError):
            raise ChannelClosed() from None

    def close(self) -> None:
        self.proto.close(WS_CLOSE_NORMAL)


def _send(proto, response: HttpResponse) -> None:
    proto.response_bytes(response.status, response.header_list(), response.body)


async def _pump(transport, chunks) -> None:
    try:
        async for chunk in chunks:
            await transport.send_bytes(chunk)
    except RSGIProtocolClosed:
        pass                        # the client went away while we wrote
    except Exception:
        log.exception("event=stream_failed")


async def _client_gone(proto) -> None:
    await proto.client_disconnect()     # granian's own awaitable: wrapped in a real task


async def _stream(proto, response: HttpStream) -> None:
    """Write the chunks as they come until the stream ends or the client goes away (or a
    write fails); either way the chunk iterator is closed, which frees what it holds."""
    transport = proto.response_stream(response.status, response.header_list())
    pump = asyncio.ensure_future(_pump(transport, response.chunks))
    gone = asyncio.ensure_future(_client_gone(proto))
    try:
        await asyncio.wait((pump, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, gone):
            task.cancel()
        await asyncio.gather(pump, gone, return_exceptions=True)
        await response.chunks.aclose()


def start_worker(app: RsgiApp, listen_fd: int, loop: asyncio.AbstractEventLoop,
                 worker_id: int) -> tuple[WorkerSignal, asyncio.Event]:
    """Serve `listen_fd` with `app` on `loop`; set the signal to stop accepting. The event
    is set once granian has stopped."""
    stopped = asyncio.Event()
    signal = WorkerSignal()
    signal.add_cb(lambda: loop.call_soon_threadsafe(stopped.set))
    worker = RSGIWorker(worker_id, (None, SocketHolder(listen_fd, False, BACKLOG)), None,
                        1, BLOCKING_THREADS_MAX, 1, 30, BACKPRESSURE, "auto", None, None,
                        WEBSOCKETS, None, *_SSL_OFF, (None, None))
    scheduler = _new_cbscheduler(loop, _future_watcher_wrapper(app.__rsgi__),
                                 impl_asyncio=True)
    worker.serve_str(scheduler, loop, signal)
    return signal, stopped
