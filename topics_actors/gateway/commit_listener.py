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
from collections.abc import Callable

import zmq
import zmq.asyncio

from topics_actors.child_process import die_of_bug
from topics_actors.errors import InvariantViolation
from topics_actors.gateway.shared_reads import SharedReads
from topics_actors.protocol.commit_feed import (
    FEED_HWM_MESSAGES, NotePage, decode_note, topic_filter,
)

log = logging.getLogger(__name__)

SUBSCRIBE_SETTLE_S = 0.1


class Wake:
    """A stream's wake-up: set by a commit notification (or a stop), waited on with a
    timeout. asyncio.Event with wait_for spent a task and a timer per wait; one stream
    has one waiter, so a future and a timer do (this is on every stream's every park)."""
    __slots__ = ("flag", "future")

    def __init__(self):
        self.flag = False
        self.future: asyncio.Future | None = None

    def set(self) -> None:
        self.flag = True
        future = self.future
        if future is not None and not future.done():
            future.set_result(True)

    def clear(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag


def _time_up(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)


async def wait_woken(wake: Wake, timeout_s: float) -> bool:
    """Wait until `wake` is set (True) or `timeout_s` passes (False)."""
    if wake.flag:
        return True
    loop = asyncio.get_running_loop()
    future = wake.future = loop.create_future()
    timer = loop.call_later(timeout_s, _time_up, future)
    try:
        return await future
    finally:
        timer.cancel()
        wake.future = None


# A stream that can take a notification's page as it is, without waking: True if it did.
Taker = Callable[[str, NotePage], bool]


class CommitListener:
    """`die`: what a bug met while waking streams does (child_process.die_of_bug: the
    process ends; a test's seam records it)."""

    def __init__(self, reads: SharedReads, ctx: zmq.asyncio.Context | None = None,
                 die: Callable[[InvariantViolation], None] = die_of_bug):
        self.reads = reads
        self.die = die
        self.ctx = ctx or zmq.asyncio.Context.instance()
        self.sock: zmq.asyncio.Socket | None = None
        self.task: asyncio.Task | None = None
        self.endpoints: set[str] = set()
        self.waiters: dict[str, dict[Wake, Taker | None]] = {}
        self.notes = 0
        self.taken = 0               # pages streams took without waking

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

    def watch(self, topic: str, wake: Wake, taker: Taker | None = None) -> None:
        """Wake `wake` when `topic` commits; with a `taker`, first offer it the page the
        notification carries (it may take it and stay asleep)."""
        waiters = self.waiters.get(topic)
        if waiters is None:
            waiters = self.waiters[topic] = {}
            self._ensure().setsockopt(zmq.SUBSCRIBE, topic_filter(topic))
            asyncio.get_running_loop().call_later(SUBSCRIBE_SETTLE_S, self.wake, topic)
        waiters[wake] = taker

    def unwatch(self, topic: str, wake: Wake) -> None:
        waiters = self.waiters.get(topic)
        if waiters is None:
            return
        waiters.pop(wake, None)
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
        for wake, taker in list(self.waiters.get(topic, {}).items()):
            if page is not None and taker is not None and taker(topic, page):
                self.taken += 1
            else:
                wake.set()

    async def _run(self) -> None:
        while True:
            note = decode_note(await self.sock.recv_multipart())
            if note is None:
                log.warning("event=bad_commit_note")
                continue
            self.notes += 1
            try:
                self.wake(note.topic, note.page)
            except AssertionError as bug:   # InvariantViolation, or a failed assert
                self.die(bug)
                raise
            except Exception:       # the listener must live on: every stream relies on it
                log.exception("event=commit_note_failed topic=%s", note.topic)
                self.wake(note.topic)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.sock is not None:
            self.sock.close(0)
        self.sock = self.task = None
