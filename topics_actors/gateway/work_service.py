"""Queue work streams over HTTP (spec/api.md 8): `GET /v0/topics/:q/work`, for one gateway
process.

Opening a stream checks, in the contract's order, Accept (406), the query's `node` (400),
the topic (404) and its type (409) with an empty `held` at its shard, then the SSE caps
(429). The caps are the watch streams' (gateway/watch_service.py): the stream registers a
`stream_lease` at the shard its id hashes to, which counts it in that shard's `status`
until it closes or the lease, renewed every heartbeat, runs out; it registers first and
counts itself, so two racing opens can both be refused but never both admitted over a cap.
The streams share the watch streams' CommitListener.

When a stream ends, however it ends (the client went away, the queue is gone, shutdown),
the jobs delivered on it that its node still holds are released at once: a `nack` with
delay 0 of those seqs, fenced by their lease ids, so a job the client acked is skipped and
one leased again elsewhere is left alone; deliveries are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from topics_actors.errors import TopicsError, invalid
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.http_message import HttpRequest, HttpStream
from topics_actors.gateway.sse_frame import CONTENT_TYPE, HEADERS
from topics_actors.gateway.watch_request import (
    accepts_event_stream, min_heartbeat_ms, not_acceptable, owner_of,
)
from topics_actors.gateway.watch_service import LEASE_SLACK_MS, WatchService, in_background
from topics_actors.gateway.work_stream import WorkPlan, WorkStream
from topics_actors.limits import CLAIM_MAX, NODE_BYTES_MAX, clamp
from topics_actors.protocol.messages import Held, Nack, StreamLease

log = logging.getLogger(__name__)

HEARTBEAT_MS = 15_000
STREAM_PREFIX = "sse_"


def _uint_param(params: dict, name: str) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()):
        raise invalid(f"query parameter {name!r} must be a non-negative integer")
    return min(int(raw), rb.U64_MAX)


def parse_work(topic: str, query: str) -> WorkPlan:
    """The query of a work stream: `node` (required, 1..128 bytes), `max` (default 1,
    clamped to 1..1000), `lease_ms` (the topic's when absent)."""
    params = rb.query_params(query)
    node = params.get("node")
    if not node:
        raise invalid("query parameter 'node' is required")
    if len(node.encode()) > NODE_BYTES_MAX:
        raise invalid(f"node is longer than {NODE_BYTES_MAX} bytes")
    count = _uint_param(params, "max")
    return WorkPlan(topic, node, clamp(1 if count is None else count, 1, CLAIM_MAX),
                    _uint_param(params, "lease_ms"))


class WorkService:
    """The work streams of one gateway process; WatchService's stop() and close() end them
    and wait for their releases too (they share its `streams`, `stopping` and `tasks`)."""

    def __init__(self, watch: WatchService):
        self.watch = watch            # its settings, engine, listener, caps and feeds
        self.engine = watch.engine
        test_floor = watch.settings.test_min_heartbeat_ms
        self.heartbeat_ms = (min(HEARTBEAT_MS, min_heartbeat_ms(test_floor)) if test_floor
                             else HEARTBEAT_MS)
        self.lease_ms = 2 * self.heartbeat_ms + LEASE_SLACK_MS

    async def open(self, topic: str, request: HttpRequest, key: ApiKey | None) -> HttpStream:
        if not accepts_event_stream(request.header("accept")):
            raise not_acceptable()
        plan = parse_work(topic, request.query)
        await self.engine.call(topic, Held(topic, plan.node, []))   # 404, 409
        lease = StreamRegistration(self, STREAM_PREFIX + uuid.uuid4().hex, owner_of(key))
        await lease.send(self.lease_ms)
        try:
            await self.watch.check_stream_caps(lease.owner)
            await self.watch.connect_feeds()
        except BaseException:
            await lease.close_now()      # registered above: it must not count (nor when
            raise                        # the 429 goes out)
        stream = WorkStream(plan, self.engine, self.watch.listener, self.heartbeat_ms,
                            lambda: lease.renew(self.lease_ms),
                            lambda held, claiming: self._release(plan, held, claiming),
                            lambda: self.watch.stopping)
        return HttpStream(200, self._tracked(stream, lease), CONTENT_TYPE, HEADERS)

    async def _tracked(self, stream: WorkStream, lease: "StreamRegistration"):
        self.watch.streams.add(stream)
        try:    # closed explicitly: its `finally` (the release of its jobs) runs now
            async with contextlib.aclosing(stream.chunks()) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            self.watch.streams.discard(stream)
            lease.close()

    def spawn(self, coro) -> asyncio.Task:
        """Run `coro` in the background (watch_service.in_background)."""
        return in_background(coro, self.watch.tasks)

    def _release(self, plan: WorkPlan, held: dict, claiming: asyncio.Future | None) -> None:
        self.spawn(self._give_back(plan, held, claiming))

    async def _give_back(self, plan: WorkPlan, held: dict,
                         claiming: asyncio.Future | None) -> None:
        if claiming is not None:           # the client left while a claim was on its way
            try:
                reply = await claiming
            except AssertionError:          # a bug: in_background ends the process
                raise
            except Exception:               # a claim that failed took no lease
                reply = {"claimed": []}
            held.update((job[0], job[1]) for job in reply["claimed"])
        if not held:
            return
        seqs = sorted(held)
        try:
            await self.engine.call(plan.topic, Nack(plan.topic, plan.node, seqs, 0,
                                                    [held[s] for s in seqs]))
        except TopicsError as error:        # the queue is gone, or its shard restarted
            log.warning("event=work_release_failed topic=%s jobs=%d code=%s", plan.topic,
                        len(seqs), error.code.wire)


class StreamRegistration:
    """One stream's `stream_lease` at its shard: renewals and the close go out in the
    background, in order (a renewal never lands after the close)."""

    def __init__(self, service: WorkService, stream: str, owner: str):
        self.service, self.stream, self.owner = service, stream, owner
        self.last: asyncio.Future | None = None
        self.closed = False

    async def send(self, lease_ms: int, closed: bool = False) -> None:
        await self.service.engine.call(self.stream,
                                       StreamLease(self.stream, self.owner, lease_ms, closed))

    def _queue(self, lease_ms: int, closed: bool) -> None:
        before = self.last

        async def run() -> None:
            if before is not None:
                await asyncio.wait((before,))
            try:
                await self.send(lease_ms, closed)
            except TopicsError as error:    # its shard restarted: the lease is gone
                log.warning("event=stream_lease_failed stream=%s code=%s", self.stream,
                            error.code.wire)
        self.last = self.service.spawn(run())

    def renew(self, lease_ms: int) -> None:
        if not self.closed:
            self._queue(lease_ms, False)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._queue(0, True)

    async def close_now(self) -> None:
        """Close before anything else was sent in the background."""
        self.closed = True
        await self.send(0, closed=True)
