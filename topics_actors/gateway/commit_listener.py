"""The gateway's side of the commit feed (topics_actors/protocol/commit_feed.py): one SUB
socket connected to every shard's feed, subscribed to exactly the topics that some watch
stream of this gateway process watches, waking those streams when their topic commits.

Streams are woken by the shards' notifications, never by polling. Two windows where a
notification can be missed are closed elsewhere: a subscription takes a moment to reach the
shards' PUB sockets, so a topic's streams are woken once more SUBSCRIBE_SETTLE_S after it is
first subscribed; and a notification dropped on the way (a full queue, a shard restart) is
caught by the read every stream makes after each heartbeat interval of silence.
"""

from __future__ import annotations

import asyncio
import logging

import zmq
import zmq.asyncio

from topics_actors.gateway.shared_reads import SharedReads
from topics_actors.protocol.commit_feed import (
    FEED_HWM_MESSAGES, NotePage, decode_note, topic_filter,
)

log = logging.getLogger(__name__)

SUBSCRIBE_SETTLE_S = 0.1


async def wait_woken(wake: asyncio.Event, timeout_s: float) -> bool:
    """Wait until a stream's `wake` is set (True) or `timeout_s` passes (False)."""
    try:
        await asyncio.wait_for(wake.wait(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False


class CommitListener:
    def __init__(self, reads: SharedReads, ctx: zmq.asyncio.Context | None = None):
        self.reads = reads
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.sock: zmq.asyncio.Socket | None = None
        self.task: asyncio.Task | None = None
        self.endpoints: set[str] = set()
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.notes = 0

    def _ensure(self) -> zmq.asyncio.Socket:
        if self.sock is None:
            self.sock = self.ctx.socket(zmq.SUB)
            self.sock.setsockopt(zmq.LINGER, 0)
            self.sock.setsockopt(zmq.RCVHWM, FEED_HWM_MESSAGES)
            self.task = asyncio.get_running_loop().create_task(self._run())
        return self.sock

    def connect(self, endpoints: list[str]) -> None:
        sock = self._ensure()
        for endpoint in endpoints:
            if endpoint and endpoint not in self.endpoints:
                sock.connect(endpoint)
                self.endpoints.add(endpoint)

    def watch(self, topic: str, wake: asyncio.Event) -> None:
        waiters = self.waiters.get(topic)
        if waiters is None:
            waiters = self.waiters[topic] = set()
            self._ensure().setsockopt(zmq.SUBSCRIBE, topic_filter(topic))
            asyncio.get_running_loop().call_later(SUBSCRIBE_SETTLE_S, self.wake, topic)
        waiters.add(wake)

    def unwatch(self, topic: str, wake: asyncio.Event) -> None:
        waiters = self.waiters.get(topic)
        if waiters is None:
            return
        waiters.discard(wake)
        if not waiters:
            del self.waiters[topic]
            self.reads.invalidate(topic)
            if self.sock is not None:
                self.sock.setsockopt(zmq.UNSUBSCRIBE, topic_filter(topic))

    def wake(self, topic: str, page: NotePage | None = None) -> None:
        """The topic committed: its streams read again, and a page the notification carried
        serves those sitting where it starts."""
        self.reads.invalidate(topic)
        if page is not None:
            self.reads.offer(topic, page)
        for event in self.waiters.get(topic, ()):
            event.set()

    async def _run(self) -> None:
        while True:
            note = decode_note(await self.sock.recv_multipart())
            if note is None:
                log.warning("event=bad_commit_note")
                continue
            self.notes += 1
            self.wake(note.topic, note.page)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.sock is not None:
            self.sock.close(0)
        self.sock = self.task = None
