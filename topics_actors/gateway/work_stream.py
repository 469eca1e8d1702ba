"""One queue work stream: the SSE loop of `GET /v0/topics/:q/work` (spec/api.md 8) for one
connection, as an async iterator of byte chunks.

Send `retry:`; then loop: ask the queue's shard which of the jobs delivered on this
connection its node still holds (`held`: a job the client acked, on any gateway, or whose
lease ran out, frees its slot), claim the deficit up to `max` (a claim window of the queue
is honoured: the claim is an ordinary `claim`), emit one `job` frame per job; then wait
until the queue's commit notification wakes the stream (an append, or the topic's deletion)
or POLL_S passes (acks, nacks and expired leases announce nothing). After `heartbeat_ms`
of silence a `: hb` comment; the stream's lease at its shard is renewed once per
heartbeat interval, however busy the stream is.

The queue gone or no longer a queue ends the stream with an `error` frame; the gateway's
shutdown with `server_shutting_down`. However it ends, `release` gets the jobs it holds and
any claim still in flight, to give them back at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable

import orjson

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import sse_frame as sse
from topics_actors.gateway.commit_listener import CommitListener, Wake, wait_woken
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.claim_page import render_job
from topics_actors.limits import CLAIM_WAIT_MS_MAX
from topics_actors.protocol.messages import Claim, Held

log = logging.getLogger(__name__)

POLL_S = 0.25           # the reference's wait when no append comes (spec/api.md 8)
_GONE = (ErrorCode.NOT_A_QUEUE, ErrorCode.TOPIC_NOT_FOUND)


@dataclasses.dataclass(frozen=True)
class WorkPlan:
    topic: str
    node: str
    max: int                    # live leases this connection holds at most (1..1000)
    lease_ms: int | None        # None: the topic's lease_ms


class QueueGone(Exception):
    """The topic was deleted, or is no longer a queue: the stream ends."""


def no_longer_a_queue(topic: str) -> bytes:
    return orjson.dumps({"code": 409, "error": "topic is no longer a queue", "topic": topic})


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class WorkStream:
    def __init__(self, plan: WorkPlan, engine: EngineLink, listener: CommitListener,
                 heartbeat_ms: int, renew: Callable[[], None],
                 release: Callable[[dict, asyncio.Future | None], None],
                 stopping: Callable[[], bool], poll_s: float = POLL_S):
        self.plan = plan
        self.engine = engine
        self.listener = listener
        self.heartbeat_s = heartbeat_ms / 1000
        self.renew = renew              # () -> the stream's lease at its shard, async
        self.release = release          # (held, claim in flight) -> given back, async
        self.stopping = stopping
        self.poll_s = poll_s
        self.wake = Wake()
        self.held: dict[int, str] = {}  # seq -> lease id, delivered on this connection
        self.claiming: asyncio.Future | None = None
        self._opening = b'{"topic":' + orjson.dumps(plan.topic) + b","

    async def chunks(self) -> AsyncIterator[bytes]:
        topic = self.plan.topic
        self.listener.watch(topic, self.wake)
        try:
            yield sse.RETRY
            quiet_since = renewed = time.monotonic()
            while not self.stopping():
                self.wake.clear()
                try:
                    out = await self._round()
                except QueueGone:
                    yield sse.frame(b"error", None, no_longer_a_queue(topic))
                    return
                if out:
                    yield out
                    quiet_since = time.monotonic()
                if time.monotonic() - renewed >= self.heartbeat_s:   # busy or idle alike
                    renewed = time.monotonic()
                    self.renew()
                remaining = self.heartbeat_s - (time.monotonic() - quiet_since)
                if remaining > 0:
                    await wait_woken(self.wake, min(remaining, self.poll_s))
                elif not self.stopping():
                    yield sse.heartbeat(now_ms())
                    quiet_since = time.monotonic()
            yield sse.frame(b"error", None, sse.shutting_down_data())
        finally:
            self.listener.unwatch(topic, self.wake)
            self.release(dict(self.held), self.claiming)

    async def _round(self) -> bytes:
        """Claim what this connection may hold more; the frames of the jobs claimed."""
        plan = self.plan
        try:
            if self.held:
                seqs = list(self.held)
                reply = await self.engine.call(plan.topic, Held(
                    plan.topic, plan.node, seqs, [self.held[s] for s in seqs]))
                still = set(reply["held"])
                self.held = {s: lease for s, lease in self.held.items() if s in still}
            deficit = plan.max - len(self.held)
            if deficit <= 0:
                return b""
            reply = await self._claim(deficit)
        except TopicsError as error:
            if error.code in _GONE:
                raise QueueGone() from None
            log.warning("event=work_claim_failed topic=%s code=%s", plan.topic, error.code.wire)
            return b""          # the shard is restarting or busy: again at the next wake
        frames = []
        for job in reply["claimed"]:
            self.held[job[0]] = job[1]
            frames.append(sse.frame(b"job", b"%d" % job[0], render_job(job, self._opening)))
        return b"".join(frames)

    async def _claim(self, count: int) -> dict:
        """A claim that outlives the stream: if the client goes away meanwhile, `release`
        waits for its leases and gives them back too."""
        plan = self.plan
        task = asyncio.ensure_future(self.engine.call(
            plan.topic, Claim(plan.topic, plan.node, count, plan.lease_ms), CLAIM_WAIT_MS_MAX))
        self.claiming = task
        try:
            reply = await asyncio.shield(task)
        except TopicsError:
            self.claiming = None
            raise
        self.claiming = None
        return reply
