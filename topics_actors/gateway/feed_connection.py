"""One shard's commit feed as the gateway reads it (protocol/commit_feed.py): a Unix stream
connection to the shard's feed socket, kept up by the event loop.

It writes the subscription frames the commit listener asks for, and hands each note it
reads to `on_note`. While it is down (the shard is starting or restarting) nothing is
written: each time it comes up it subscribes to every topic the listener watches, then
calls `on_up`, since notes written while it was down are lost and the streams must look
again. A refused connection is retried after RETRY_S, doubling up to RETRY_MAX_S.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from topics_actors.protocol.commit_feed import (
    SUBSCRIPTION_TOPICS_MAX, Note, decode_note, encode_subscription,
)
from topics_actors.protocol.lane import FrameReader, LaneBroken, frames

log = logging.getLogger(__name__)

RETRY_S = 0.05
RETRY_MAX_S = 1.0


class _FeedProtocol(asyncio.Protocol):
    def __init__(self, conn: "FeedConnection"):
        self.conn = conn
        self.reader = FrameReader()

    def data_received(self, data: bytes) -> None:
        try:
            raws = self.reader.feed(data)
        except LaneBroken as error:
            log.warning("event=feed_broken path=%s reason=%s", self.conn.path, error)
            self.conn.drop()
            return
        on_note = self.conn.on_note
        for raw in raws:
            note = decode_note(raw)
            if note is None:
                log.warning("event=bad_commit_note path=%s", self.conn.path)
                continue
            on_note(note)

    def connection_lost(self, exc) -> None:
        self.conn.lost()


class FeedConnection:
    """`topics()`: every topic to subscribe to when the connection comes up."""

    def __init__(self, path: str, on_note: Callable[[Note], None],
                 topics: Callable[[], Iterable[str]], on_up: Callable[[], None]):
        self.path = path
        self.on_note = on_note
        self.topics = topics
        self.on_up = on_up
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._task = self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        delay_s = RETRY_S
        while not self.closed:
            try:
                transport, _ = await self.loop.create_unix_connection(
                    lambda: _FeedProtocol(self), self.path)
            except OSError:
                await asyncio.sleep(delay_s)
                delay_s = min(2 * delay_s, RETRY_MAX_S)
                continue
            if self.closed:
                transport.close()
                return
            self.transport = transport
            self.subscribe(True, list(self.topics()))
            self.on_up()
            return

    def subscribe(self, subscribed: bool, topics: list[str]) -> None:
        """Write a subscription change (nothing while down: the next connection carries
        the whole set)."""
        if self.transport is None or not topics:
            return
        chunks = [topics[i:i + SUBSCRIPTION_TOPICS_MAX]
                  for i in range(0, len(topics), SUBSCRIPTION_TOPICS_MAX)]
        self.transport.write(frames([encode_subscription(subscribed, c) for c in chunks]))

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.close()      # connection_lost follows, and a reconnect

    def lost(self) -> None:
        self.transport = None
        if not self.closed:
            self._task = self.loop.create_task(self._connect())

    def close(self) -> None:
        self.closed = True
        self._task.cancel()
        if self.transport is not None:
            self.transport.close()
            self.transport = None
