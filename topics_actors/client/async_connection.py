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
from topics_actors.client.reply_waits import ReplyWaits

_POLLIN, _POLLOUT, _EVENTS = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.EVENTS)


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
        self.window = asyncio.Semaphore(max_in_flight)
        self.loop = asyncio.get_running_loop()
        self.waits = ReplyWaits(self.loop)
        self.expect, self.forget = self.waits.expect, self.waits.forget
        self._writable: set[asyncio.Future] = set()   # waits for a peer to send to
        self._drain_due = False
        self._outbox: list[tuple[int, bytes]] | None = None   # requests of this pass
        self._fd = self.sock.getsockopt(zmq.FD)
        self.loop.add_reader(self._fd, self._drain)

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
                self.waits.end(corr)
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
                self.waits.resolve(raw)

    def close(self) -> None:
        self.waits.close()
        if not self.loop.is_closed():
            self.loop.remove_reader(self._fd)
        if self.watch is not None:
            self.watch.close()
        self.sock.close(0)
