"""One DEALER connection of the asyncio client: requests out, replies matched by correlation id.

The socket is a plain ZeroMQ socket that the event loop reads through its own reader on the
socket's file descriptor, not a zmq.asyncio socket. That wrapper spends a future, a
callback and several flag conversions on every send and every receive, more CPU than
building and encoding the request (docs/BENCHMARKS_HISTORY.md, "The client's call
and the gateway's loop"). ZeroMQ's descriptor is edge-triggered: it says that the socket's state
may have changed, and any call on the socket, a send included, can take that signal. So a
drain reads until the socket reports nothing more, and a send asks for one more drain on
the loop's next pass.
"""

from __future__ import annotations

import asyncio

import zmq

from topics_actors.client.curve_credentials import (
    CurveCredentials, HandshakeWatch, wait_slices,
)
from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply

EXPIRY_TICK_S = 0.05    # how often a busy connection looks for requests past their timeout
_POLLIN, _POLLOUT, _EVENTS = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.EVENTS)


def _expire(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class AsyncConnection:
    """A connection to one endpoint with at most `max_in_flight` requests outstanding
    (`window`); replies resolve the futures `expect` handed out, by correlation id."""

    def __init__(self, ctx: zmq.Context, endpoint: str, max_in_flight: int,
                 curve: CurveCredentials | None = None, watch: bool = False):
        self.endpoint = endpoint
        self.sock = zmq.Socket(ctx, zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IMMEDIATE, 1)
        if curve is not None:
            curve.apply(self.sock, endpoint)
        self.watch = HandshakeWatch(self.sock) if watch else None
        self.sock.connect(endpoint)
        self.pending: dict[int, asyncio.Future] = {}
        self.deadlines: dict[int, float] = {}     # corr -> loop time its wait ends
        self.window = asyncio.Semaphore(max_in_flight)
        self.loop = asyncio.get_running_loop()
        self._sweep: asyncio.TimerHandle | None = None
        self._writable: set[asyncio.Future] = set()   # waits for a peer to send to
        self._drain_due = False
        self._outbox: list[tuple[int, bytes]] | None = None   # requests of this pass
        self._fd = self.sock.getsockopt(zmq.FD)
        self.loop.add_reader(self._fd, self._drain)

    def expect(self, corr: int, timeout_s: float) -> asyncio.Future:
        """The future of request `corr`'s reply: None once `timeout_s` has passed (within
        EXPIRY_TICK_S after; one sweep per tick while requests wait, instead of a timer
        per request)."""
        future = self.pending[corr] = self.loop.create_future()
        self.deadlines[corr] = self.loop.time() + timeout_s
        if self._sweep is None:
            self._sweep = self.loop.call_later(EXPIRY_TICK_S, self._expire)
        return future

    def forget(self, corr: int) -> None:
        self.pending.pop(corr, None)
        self.deadlines.pop(corr, None)

    def send(self, raw: bytes, corr: int) -> bool:
        """Hand request `corr` (encoded: `raw`) to ZeroMQ without waiting: False when no
        peer can take it (with IMMEDIATE, while the connection is not up). The first send
        of a pass of the loop goes at once; the others of the same pass wait for its end
        and go together, as one message (docs/PROTOCOL.md 4.1): one wake-up of ZeroMQ's
        I/O threads for the lot."""
        if self._outbox is not None:
            self._outbox.append((corr, raw))
            return True
        try:
            self.sock.send(raw, zmq.NOBLOCK)
        except zmq.Again:
            return False
        finally:
            self._drain_soon()
        self._outbox = []
        self.loop.call_soon(self._flush)
        return True

    def _flush(self) -> None:
        """Send the requests a pass gathered, as one message. Should the connection have
        dropped since the pass's first send, their waits end now, as with no reply."""
        outbox, self._outbox = self._outbox, None
        if not outbox or self.sock.closed:
            return
        try:
            self.sock.send_multipart([raw for _, raw in outbox], zmq.NOBLOCK)
        except zmq.Again:
            for corr, _ in outbox:
                future = self.pending.get(corr)
                if future is not None:
                    _expire(future)
        self._drain_soon()

    async def send_when_connected(self, raw: bytes, corr: int, timeout_ms: float) -> bool:
        """Send `raw` once the connection is up, within `timeout_ms`; with a watch, give
        up as soon as a handshake fails."""
        if self.send(raw, corr):
            return True
        slices = wait_slices(timeout_ms) if self.watch is not None else (timeout_ms,)
        for slice_ms in slices:
            if await self._wait_writable(slice_ms) and self.send(raw, corr):
                return True
            if self.watch is not None and self.watch.failed():
                return False
        return False

    async def _wait_writable(self, timeout_ms: float) -> bool:
        waiter = self.loop.create_future()
        self._writable.add(waiter)
        self._drain_soon()    # the connection may have come up since the last look
        try:
            return await asyncio.wait_for(waiter, max(0.0, timeout_ms) / 1000)
        except TimeoutError:
            return False
        finally:
            self._writable.discard(waiter)

    def _drain_soon(self) -> None:
        if not self._drain_due:
            self._drain_due = True
            self.loop.call_soon(self._drain)

    def _drain(self) -> None:
        """Read every reply the socket holds, and wake the waits for a writable socket."""
        self._drain_due = False
        sock = self.sock
        if sock.closed:
            return
        while True:
            events = sock.getsockopt(_EVENTS)
            if events & _POLLOUT and self._writable:
                for waiter in self._writable:
                    if not waiter.done():
                        waiter.set_result(True)
            if not events & _POLLIN:
                return
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            for raw in frames:
                self._resolve(raw)

    def _resolve(self, raw: bytes) -> None:
        try:
            corr, body = decode_reply(raw)
        except TopicsError as error:
            future = self.pending.get(getattr(error, "corr", -1))
            if future is not None and not future.done():
                future.set_exception(error)
            return
        future = self.pending.get(corr)
        if future is not None and not future.done():
            future.set_result(body)

    def _expire(self) -> None:
        now = self.loop.time()
        for corr in [c for c, deadline in self.deadlines.items() if deadline <= now]:
            _expire(self.pending[corr])
        self._sweep = (self.loop.call_later(EXPIRY_TICK_S, self._expire) if self.deadlines
                       else None)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        if not self.loop.is_closed():
            self.loop.remove_reader(self._fd)
        if self.watch is not None:
            self.watch.close()
        self.sock.close(0)
