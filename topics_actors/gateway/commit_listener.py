"""The gateway's side of the commit feed (topics_actors/protocol/commit_feed.py): one feed
connection to every shard (gateway/feed_connection.py), subscribed to exactly the topics
that some watch stream of this gateway process watches, waking those streams when their
topic commits.

Streams are woken by the shards' notes, never by polling. Two windows where a note can be
missed are closed elsewhere: a subscription travels on the feed connection while the
stream's first read travels on the request lane, so a commit between the two is not
noted, and a topic's streams are woken once more SUBSCRIBE_SETTLE_S after it is first
subscribed; and notes lost on the way (a feed connection that was down, a shard restart)
are caught by waking every stream when a feed connection comes up, and by the read every
stream makes after each heartbeat interval of silence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from topics_actors.child_process import die_of_bug
from topics_actors.errors import InvariantViolation
from topics_actors.gateway.feed_connection import FeedConnection
from topics_actors.gateway.shared_reads import SharedReads
from topics_actors.protocol.commit_feed import Note, NotePage

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

    def __init__(self, reads: SharedReads,
                 die: Callable[[InvariantViolation], None] = die_of_bug):
        self.reads = reads
        self.die = die
        self.feeds: dict[str, FeedConnection] = {}      # by the shard's feed socket path
        self.waiters: dict[str, dict[Wake, Taker | None]] = {}
        self.notes = 0
        self.taken = 0               # pages streams took without waking

    def connect(self, paths: list[str]) -> None:
        for path in paths:
            if path and path not in self.feeds:
                self.feeds[path] = FeedConnection(path, self._note, self.waiters.keys,
                                                  self._wake_all)

    def watch(self, topic: str, wake: Wake, taker: Taker | None = None) -> None:
        """Wake `wake` when `topic` commits; with a `taker`, first offer it the page the
        note carries (it may take it and stay asleep)."""
        waiters = self.waiters.get(topic)
        if waiters is None:
            waiters = self.waiters[topic] = {}
            for feed in self.feeds.values():
                feed.subscribe(True, [topic])
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
            for feed in self.feeds.values():
                feed.subscribe(False, [topic])

    def wake(self, topic: str, page: NotePage | None = None) -> None:
        """The topic committed: its streams read again, and a page the note carried
        serves those sitting where it starts."""
        self.reads.invalidate(topic)
        if page is not None:
            self.reads.offer(topic, page)
        for wake, taker in list(self.waiters.get(topic, {}).items()):
            if page is not None and taker is not None and taker(topic, page):
                self.taken += 1
            else:
                wake.set()

    def _wake_all(self) -> None:
        """A feed connection came up: what it missed while down, every stream reads."""
        for topic in list(self.waiters):
            self.wake(topic)

    def _note(self, note: Note) -> None:
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
        for feed in self.feeds.values():
            feed.close()
        self.feeds.clear()
