"""A lane (protocol/lane.py) as a connection of the asyncio transport: the same duties as
AsyncConnection (requests out, replies matched by correlation id, at most `max_in_flight`
outstanding, a wait per request that ends with None), on a Unix stream socket the event
loop reads and writes itself.

It connects when made. Until it is up a send is refused, as with ZeroMQ's IMMEDIATE, and
`send_when_connected` waits for it. When the shard closes its end (it stopped or
restarted), every request in flight ends at once with no reply, so the client core retries
it on a new lane rather than waiting out its timeout; a retry carries the request's session
key, so a write the shard had applied is not applied twice.
"""

from __future__ import annotations

import asyncio

from topics_actors.client.reply_waits import ReplyWaits
from topics_actors.protocol.lane import FrameReader, LaneBroken, frame, frames


class _LaneProtocol(asyncio.Protocol):
    def __init__(self, conn: "LaneConnection"):
        self.conn = conn
        self.reader = FrameReader()

    def data_received(self, data: bytes) -> None:
        try:
            raws = self.reader.feed(data)
        except LaneBroken:
            self.conn.close()
            return
        resolve = self.conn.waits.resolve
        for raw in raws:
            resolve(raw)

    def connection_lost(self, exc) -> None:
        self.conn.lost()


class LaneConnection:
    watch = None             # no handshake to watch: the lane is the node's own socket

    def __init__(self, path: str, max_in_flight: int):
        self.endpoint = path
        self.loop = asyncio.get_running_loop()
        self.window = asyncio.Semaphore(max_in_flight)
        self.waits = ReplyWaits(self.loop)
        self.expect, self.forget = self.waits.expect, self.waits.forget
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._outbox: list[bytes] | None = None
        self._up = self.loop.create_task(self._connect())

    async def _connect(self) -> bool:
        try:
            self.transport, _ = await self.loop.create_unix_connection(
                lambda: _LaneProtocol(self), self.endpoint)
        except OSError:
            self.closed = True
            return False
        return True

    def send(self, raw: bytes, corr: int) -> bool:
        """Write request `corr` now; False while the lane is not up. The first send of a
        loop pass is written at once, the others of that pass together at its end."""
        if self.transport is None or self.closed:
            return False
        if self._outbox is not None:
            self._outbox.append(raw)
            return True
        self.transport.write(frame(raw))
        self._outbox = []
        self.loop.call_soon(self._flush)
        return True

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, None
        if outbox and not self.closed:
            self.transport.write(frames(outbox))

    async def send_when_connected(self, raw: bytes, corr: int, timeout_ms: float) -> bool:
        if self.send(raw, corr):
            return True
        try:
            up = await asyncio.wait_for(asyncio.shield(self._up), max(0.0, timeout_ms) / 1000)
        except TimeoutError:
            return False
        return up and self.send(raw, corr)

    def lost(self) -> None:
        """The shard closed the lane: the requests in flight end now, unanswered."""
        self.closed = True
        self.waits.end_all()

    def close(self) -> None:
        self.closed = True
        self.waits.close()
        if not self._up.done():
            self._up.cancel()
        if self.transport is not None:
            self.transport.close()
