"""Watch sessions over HTTP (spec/api.md 7.1, 7.2): `POST /v0/watch` and
`GET /v0/watch/:wid`, for one gateway process.

Session state lives in the shard that owns hash(wid) (topics_actors/shard/watch_sessions.py)
so that any gateway process of the node can serve any session; the streams of this process
share one CommitListener and one SharedReads. Node-wide caps (sessions, SSE streams in
total and per key) are checked against the sum over the shards' `status`; a stream open
registers first and counts itself, so two racing opens can both be refused but never both
admitted over the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from topics_actors.errors import ErrorCode, TopicsError, topic_not_found
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, forbidden
from topics_actors.gateway.commit_listener import CommitListener
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.http_message import HttpRequest, HttpStream
from topics_actors.gateway.shared_reads import ReadView, SharedReads
from topics_actors.gateway.sse_frame import CONTENT_TYPE, HEADERS
from topics_actors.gateway.watch_request import (
    HEARTBEAT_MS_MAX, SESSION_TTL_MS, accepts_event_stream, min_heartbeat_ms, new_wid,
    not_acceptable, owner_of, parse_watch, presented_key,
)
from topics_actors.gateway.watch_stream import WatchStream
from topics_actors.protocol.commit_feed import feed_path
from topics_actors.protocol.messages import GetTopic, WatchCreate, WatchCursor, WatchOpen
from topics_actors.watch_cursor import WatchCursors, decode_cursor

log = logging.getLogger(__name__)

LEASE_SLACK_MS = 5_000
REPORT_INTERVAL_S = 0.25        # a stream's cursor reports, at most this often (but the last)
REPORTS_PER_S_MAX = 400         # ... and this process's streams together, at most this often


def report_interval_s(streams: int) -> float:
    """How often one stream may report its cursor when `streams` are open here. Reports
    are ZeroMQ requests to the shards: at 1000 streams one per 250 ms each was 4000 a
    second and most of the gateway's time, which delayed the records themselves."""
    return max(REPORT_INTERVAL_S, streams / REPORTS_PER_S_MAX)


def throttled(message: str, detail: dict | None = None) -> TopicsError:
    return TopicsError(message, ErrorCode.THROTTLED, detail)


class WatchService:
    def __init__(self, settings, engine: EngineLink):
        self.settings = settings
        self.engine = engine
        self.reads = SharedReads(engine)
        self.listener = CommitListener(self.reads)
        # This process's SSE streams, watch and queue work streams (gateway/work_service.py)
        # alike: stop() wakes them all; `tasks` their background messages to the shards.
        self.streams: set = set()
        self.stopping = False
        self.tasks: set[asyncio.Task] = set()
        self._feeds_known = False        # every shard's feed is connected (paths are fixed)

    def page_counts(self) -> dict:
        """Where this process's watch streams got their pages (/v0/metrics)."""
        reads = self.reads
        return {"read": reads.fetched, "shared": reads.shared,
                "from_commit": reads.offered_pages, "written_while_waiting": self.listener.taken}

    def stop(self) -> None:
        """Shutdown: every stream sends its `error` frame and ends (a work stream also
        releases its jobs)."""
        self.stopping = True
        for stream in list(self.streams):
            stream.wake.set()

    async def close(self, timeout_s: float = 1.0) -> None:
        """Let the last cursor reports (and work streams' releases) reach their shards
        (briefly), then stop listening."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout_s)
        for task in list(self.tasks):
            task.cancel()
        self.listener.close()

    # --- POST /v0/watch ---------------------------------------------------------------------

    async def topic_states(self, topics: dict, lenient: bool) -> dict:
        """{name: {from_seq, head_seq, earliest_seq}} of `topics` ({name: (from_seq,
        tail)}); an unknown topic is 404 topic_not_found, or left out when `lenient`."""
        names = list(topics)
        replies = await asyncio.gather(*(self.engine.call(n, GetTopic(n, False)) for n in names),
                                       return_exceptions=True)
        states = {}
        for name, reply in zip(names, replies):
            if isinstance(reply, TopicsError) and reply.code is ErrorCode.TOPIC_NOT_FOUND:
                if lenient:
                    continue
                raise topic_not_found(name)
            if isinstance(reply, BaseException):
                raise reply
            from_seq, tail = topics[name]
            states[name] = {"from_seq": reply["head_seq"] if tail else from_seq,
                            "head_seq": reply["head_seq"], "earliest_seq": reply["earliest_seq"]}
        return states

    async def create(self, request: HttpRequest, key: ApiKey | None) -> dict:
        lenient = rb.query_bool(rb.query_params(request.query), "lenient", False)
        plan = parse_watch(rb.json_object(request, empty_ok=False),
                           min_heartbeat_ms(self.settings.test_min_heartbeat_ms))
        for name in plan.topics:
            if key is not None and not key.allows_name(name):
                raise forbidden("this key may not watch this topic", name)
        states = await self.topic_states(plan.topics, lenient)
        cap = self.settings.watch_sessions_max
        if cap and (await self.census())["watch_sessions"] >= cap:
            raise throttled("the watch session cap is reached",
                            {"limit": "max_watch_sessions", "max": cap})
        wid = new_wid()
        cursors = {name: state["from_seq"] for name, state in states.items()}
        await self.engine.call(wid, WatchCreate(wid, owner_of(key), cursors, plan.options))
        return {"wid": wid, "stream_url": f"/v0/watch/{wid}", "session_ttl_ms": SESSION_TTL_MS,
                "topics": states, "performance": {"server_total_ms": 0.0}}

    async def census(self) -> dict:
        total = {"watch_sessions": 0, "sse_streams": 0, "sse_streams_by_owner": {}}
        for status in await self.engine.shard_statuses():
            total["watch_sessions"] += status.get("watch_sessions", 0)
            total["sse_streams"] += status.get("sse_streams", 0)
            for owner, count in status.get("sse_streams_by_owner", {}).items():
                by_owner = total["sse_streams_by_owner"]
                by_owner[owner] = by_owner.get(owner, 0) + count
        return total

    # --- GET /v0/watch/:wid -----------------------------------------------------------------

    async def open(self, request: HttpRequest, wid: str) -> HttpStream:
        if not accepts_event_stream(request.header("accept")):
            raise not_acceptable()
        params = rb.query_params(request.query)
        key = presented_key(self.settings.keys, request.header("authorization"),
                            params.get("token"))
        rewind = decode_cursor(request.header("last-event-id"))
        stream_id = uuid.uuid4().hex
        try:
            session = await self.engine.call(wid, WatchOpen(
                wid, stream_id, owner_of(key), 2 * HEARTBEAT_MS_MAX + LEASE_SLACK_MS, rewind))
        except TopicsError as error:
            if error.code is ErrorCode.UNAUTHORIZED:
                raise TopicsError("a watch stream needs the key that created the session",
                                  ErrorCode.UNAUTHORIZED) from None
            raise
        options = session["options"]
        lease_ms = 2 * options["heartbeat_ms"] + LEASE_SLACK_MS
        report = self._report(wid, stream_id, lease_ms)
        try:
            await self.check_stream_caps(session["owner"])
            await self.connect_feeds()
        except BaseException:
            report(session["cursors"], True)      # registered above: it must not count
            raise
        stream = WatchStream(WatchCursors(session["cursors"]), ReadView.from_options(options),
                             options["heartbeat_ms"], self.reads, self.listener, report,
                             lambda: self.stopping)
        return HttpStream(200, self._tracked(stream), CONTENT_TYPE, HEADERS, stream.attach)

    async def _tracked(self, stream: WatchStream):
        self.streams.add(stream)
        try:    # closed explicitly: its `finally` (unwatch, the closing report) runs now
            async with contextlib.aclosing(stream.chunks()) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            self.streams.discard(stream)

    async def check_stream_caps(self, owner: str) -> None:
        total_max = self.settings.sse_connections_max
        per_key_max = self.settings.sse_connections_per_key_max if owner else 0
        if not total_max and not per_key_max:
            return
        census = await self.census()
        if total_max and census["sse_streams"] > total_max:
            raise throttled("too many concurrent SSE connections")
        if per_key_max and census["sse_streams_by_owner"].get(owner, 0) > per_key_max:
            raise throttled("too many concurrent SSE connections for this key")

    async def connect_feeds(self) -> None:
        """Subscribe to every shard's commit feed (once their ipc endpoints are known)."""
        if self._feeds_known:
            return
        status = await self.engine.node_status()
        feeds = [feed_path(s.get("ipc", "")) for s in status["shards"]]
        self.listener.connect(feeds)
        self._feeds_known = all(feeds)

    def _report(self, wid: str, stream_id: str, lease_ms: int) -> "CursorReporter":
        return CursorReporter(self.engine, wid, stream_id, lease_ms, self.tasks,
                              lambda: report_interval_s(len(self.streams)))


class CursorReporter:
    """Sends one stream's cursor map to its session's shard in the background (a stream
    never waits for it): at most one report in flight and at most one per
    report_interval_s() per stream, the newest map replacing older ones that wait; the
    closing report goes out at once (after one in flight) and last. A reconnect without
    `Last-Event-ID` after a clean end therefore resumes exactly; only a gateway that dies
    can leave the session's map up to that interval behind (records delivered again,
    none lost)."""

    def __init__(self, engine: EngineLink, wid: str, stream_id: str, lease_ms: int,
                 tasks: set, interval_s=lambda: REPORT_INTERVAL_S):
        self.engine, self.wid, self.stream_id, self.lease_ms = engine, wid, stream_id, lease_ms
        self.tasks = tasks
        self.interval_s = interval_s
        self.pending: tuple[dict, bool] | None = None
        self.closed = False
        self.last_s = -1e9
        self.task: asyncio.Task | None = None
        self.timer: asyncio.TimerHandle | None = None

    def interval(self) -> float:
        """Seconds between two reports; a quarter of the stream's lease at most, since the
        reports renew it."""
        return min(self.interval_s(), self.lease_ms / 4000)

    def __call__(self, cursors: dict, closed: bool) -> None:
        self.pending = (cursors, closed)
        self.closed = self.closed or closed
        self._kick()

    def _kick(self) -> None:
        if self.task is not None or self.pending is None:
            return                  # the report in flight sends this one when it is done
        wait_s = 0.0 if self.closed else self.last_s + self.interval() - time.monotonic()
        if wait_s > 0:
            if self.timer is None:
                self.timer = asyncio.get_running_loop().call_later(wait_s, self._fire)
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.task = asyncio.ensure_future(self._send())
        self.tasks.add(self.task)
        self.task.add_done_callback(self.tasks.discard)

    def _fire(self) -> None:
        self.timer = None
        self._kick()

    async def _send(self) -> None:
        cursors, closed = self.pending
        self.pending, self.last_s = None, time.monotonic()
        try:
            await self.engine.call(self.wid, WatchCursor(self.wid, self.stream_id, cursors,
                                                         self.lease_ms, closed))
        except TopicsError as error:     # the session's shard restarted: it is gone
            log.warning("event=watch_report_failed wid=%s code=%s", self.wid, error.code.wire)
        finally:
            self.task = None
            self._kick()
