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

import logging
import time
from collections.abc import AsyncIterator, Callable

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import sse_frame as sse
from topics_actors.gateway.commit_listener import CommitListener, Wake, wait_woken
from topics_actors.gateway.http_message import StreamSink
from topics_actors.gateway.shared_reads import ReadView, SharedReads
from topics_actors.protocol.commit_feed import NotePage
from topics_actors.watch_cursor import WatchCursors, WatchEvent

log = logging.getLogger(__name__)

# A heartbeat check re-reads a topic unless some stream of this gateway read it this
# recently: a lost notification is caught at most this much later than the heartbeat.
HEARTBEAT_READ_SHARE_S = 1.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class WatchStream:
    def __init__(self, state: WatchCursors, view: ReadView, heartbeat_ms: int,
                 reads: SharedReads, listener: CommitListener,
                 report: Callable[[dict, bool], None], stopping: Callable[[], bool]):
        self.state = state
        self.view = view
        self.heartbeat_s = heartbeat_ms / 1000
        self.reads = reads
        self.listener = listener
        self.report = report            # (cursors, closed) -> the session's shard, async
        self.stopping = stopping
        self.wake = Wake()
        self.sink: StreamSink | None = None   # the connection, while the stream runs
        self.waiting = False            # parked between rounds: it may take a page
        self.quiet_since = 0.0

    def attach(self, sink: StreamSink | None) -> None:
        self.sink = sink

    def take(self, topic: str, page: NotePage) -> bool:
        """A commit notification's page, written to the connection at once if the stream
        waits at exactly its start and would read exactly it (shared_reads.offered); the
        stream stays asleep. False: wake the stream instead (it reads as usual)."""
        state, sink = self.state, self.sink
        if not self.waiting or sink is None or state.cursors.get(topic) != page.from_seq \
                or topic in state.deleted or not sink.ready():
            return False
        read = self.reads.offered(topic, page.from_seq, self.view)
        if read is None:
            return False
        out = self._frames(topic, read)
        if out:                     # nothing when the view's node filtered every record
            sink.push(out)
        self.quiet_since = time.monotonic()
        self.report(state.cursors, False)    # the map itself: a report sends it as it is then
        return True

    def _frames(self, topic: str, read) -> bytes:
        """The frames of reading `read` (a page without tombstone), the cursor moved. Streams
        in the same state (cursors, liveness of the topic) that read the same page write the
        same bytes: made once per page for all of them (shared_reads.frames), each of the
        others only moves its cursor as the read would."""
        state = self.state
        key = (tuple(state.cursors.items()), state.live.get(topic, False))
        out = self.reads.frames(topic, read, key)
        if out is None:
            out = b"".join(sse.render(e) for e in state.read(topic, read))
            self.reads.keep_frames(topic, read, key, out)
        else:
            state.advance(topic, read)
        return out

    async def chunks(self) -> AsyncIterator[bytes]:
        state = self.state
        for topic in state.cursors:
            self.listener.watch(topic, self.wake, self.take)
        try:
            yield sse.RETRY
            self.quiet_since, reported = time.monotonic(), dict(state.cursors)
            while not self.stopping():
                self.wake.clear()
                async for chunk in self._round():
                    yield chunk
                    self.quiet_since = time.monotonic()
                if state.finished():
                    return
                if state.cursors != reported:
                    reported = dict(state.cursors)
                    self.report(reported, False)
                if await self._wait():
                    continue
                if not self.stopping():
                    yield sse.heartbeat(now_ms())
                    self.quiet_since = time.monotonic()
                    self.report(dict(state.cursors), False)      # renews the lease
                    for topic in state.cursors:    # a lost notification is caught here
                        self.reads.refresh(topic, HEARTBEAT_READ_SHARE_S)
            yield sse.frame(b"error", state.cursor_id(), sse.shutting_down_data())
        finally:
            for topic in state.cursors:
                self.listener.unwatch(topic, self.wake)
            self.report(dict(state.cursors), True)

    async def _wait(self) -> bool:
        """Wait for a wake (True) or a heartbeat interval of silence (False); pages taken
        meanwhile count as traffic, so the heartbeat is due only after real silence."""
        self.waiting = True
        try:
            while True:
                remaining = self.heartbeat_s - (time.monotonic() - self.quiet_since)
                if remaining <= 0:
                    return False
                if await wait_woken(self.wake, remaining):
                    return True
        finally:
            self.waiting = False

    async def _round(self) -> AsyncIterator[bytes]:
        for topic in list(self.state.cursors):
            async for events in catch_up(self.reads, self.state, topic, self.view,
                                         self.stopping):
                out = b"".join(sse.render(e) for e in events)
                if out:
                    yield out


async def catch_up(reads: SharedReads, state: WatchCursors, topic: str, view: ReadView,
                   stopping: Callable[[], bool]) -> AsyncIterator[list[WatchEvent]]:
    """Read `topic` from its cursor until caught up (spec/api.md 5.6 with the view's
    options), moving the cursor: the events of each page read. Used by the SSE stream and
    the WebSocket (gateway/ws_connection.py) alike. Stops early once `stopping()`."""
    while topic in state.cursors and topic not in state.deleted and not stopping():
        before = state.cursors[topic]
        try:
            page = await reads.page(topic, before, view)
        except TopicsError as error:
            if error.code is ErrorCode.TOPIC_NOT_FOUND:
                yield [state.delete(topic)]
            else:    # the shard is restarting or busy: read again at the next wake
                log.warning("event=watch_read_failed topic=%s code=%s", topic,
                            error.code.wire)
            return
        yield state.read(topic, page)
        if page.caught_up or state.cursors[topic] == before:
            return
