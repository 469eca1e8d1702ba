"""One watch stream: the SSE loop of `GET /v0/watch/:wid` (spec/api.md 7.2) for one
connection, as an async iterator of byte chunks.

Send `retry:`; then, for each topic in name order, read from its cursor until caught up
(the diff of spec/api.md 5.6 with the session's options), emitting `tombstone`, `record`,
`caught-up` and `topic-deleted` frames; then park until a watched topic's commit
notification wakes the stream, or `heartbeat_ms` of silence passes (a `: hb` comment, then
a read of every topic, which also catches up after a lost notification). The cursor map
goes back to the session's shard after every round that moved it, and at least once per
heartbeat (which renews the stream's lease there). The stream ends when every watched topic
is deleted, and with an `error` frame when the gateway shuts down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import sse_frame as sse
from topics_actors.gateway.commit_listener import CommitListener
from topics_actors.gateway.shared_reads import Page, ReadView, SharedReads

log = logging.getLogger(__name__)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class StreamState:
    """What one connection knows of its topics (pure: tested without sockets)."""

    def __init__(self, cursors: dict[str, int]):
        self.cursors = dict(sorted(cursors.items()))
        self.first_read = set(self.cursors)     # a first-read tombstone is from_seq_too_old
        self.live: dict[str, bool] = {}          # was the topic's last read caught up
        self.deleted: set[str] = set()

    def cursor_id(self) -> bytes:
        return sse.encode_cursor(self.cursors)

    def page_frames(self, topic: str, page: Page) -> bytes:
        """The frames one read produced, advancing the topic's cursor."""
        out = b""
        if page.tombstone is not None:
            self.cursors[topic] = page.tombstone["gap_to"]
            out += sse.frame(b"tombstone", self.cursor_id(), sse.tombstone_data(
                topic, page.tombstone, topic in self.first_read))
            self.live[topic] = False
        self.first_read.discard(topic)
        if page.data is not None:
            self.cursors[topic] = page.next_from_seq
            out += sse.frame(b"record", self.cursor_id(), page.data)
            self.live[topic] = False
        elif page.tombstone is None:
            self.cursors[topic] = page.next_from_seq
        if page.caught_up and not self.live.get(topic, False):
            out += sse.frame(b"caught-up", self.cursor_id(),
                             sse.caught_up_data(topic, page.head_seq))
            self.live[topic] = True
        return out

    def deleted_frame(self, topic: str) -> bytes:
        self.deleted.add(topic)
        return sse.frame(b"topic-deleted", self.cursor_id(), sse.deleted_data(topic))

    def finished(self) -> bool:
        return len(self.deleted) == len(self.cursors)


class WatchStream:
    def __init__(self, state: StreamState, view: ReadView, heartbeat_ms: int,
                 reads: SharedReads, listener: CommitListener,
                 report: Callable[[dict, bool], None], stopping: Callable[[], bool]):
        self.state = state
        self.view = view
        self.heartbeat_s = heartbeat_ms / 1000
        self.reads = reads
        self.listener = listener
        self.report = report            # (cursors, closed) -> the session's shard, async
        self.stopping = stopping
        self.wake = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        state = self.state
        for topic in state.cursors:
            self.listener.watch(topic, self.wake)
        try:
            yield sse.RETRY
            quiet_since, reported = time.monotonic(), dict(state.cursors)
            while not self.stopping():
                self.wake.clear()
                async for chunk in self._round():
                    yield chunk
                    quiet_since = time.monotonic()
                if state.finished():
                    return
                if state.cursors != reported:
                    reported = dict(state.cursors)
                    self.report(reported, False)
                remaining = self.heartbeat_s - (time.monotonic() - quiet_since)
                if remaining > 0 and await self._woken(remaining):
                    continue
                if not self.stopping():
                    yield sse.heartbeat(now_ms())
                    quiet_since = time.monotonic()
                    self.report(dict(state.cursors), False)      # renews the lease
                    for topic in state.cursors:    # a lost notification is caught here
                        self.reads.invalidate(topic)
            yield sse.frame(b"error", state.cursor_id(), sse.shutting_down_data())
        finally:
            for topic in state.cursors:
                self.listener.unwatch(topic, self.wake)
            self.report(dict(state.cursors), True)

    async def _woken(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.wake.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False

    async def _round(self) -> AsyncIterator[bytes]:
        state = self.state
        for topic in list(state.cursors):
            while topic not in state.deleted and not self.stopping():
                before = state.cursors[topic]
                try:
                    page = await self.reads.page(topic, before, self.view)
                except TopicsError as error:
                    if error.code is ErrorCode.TOPIC_NOT_FOUND:
                        yield state.deleted_frame(topic)
                    else:    # the shard is restarting or busy: read again at the next wake
                        log.warning("event=watch_read_failed topic=%s code=%s", topic,
                                    error.code.wire)
                    break
                out = state.page_frames(topic, page)
                if out:
                    yield out
                if page.caught_up or state.cursors[topic] == before:
                    break
