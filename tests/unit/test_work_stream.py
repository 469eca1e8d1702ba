"""A queue's work stream without sockets (spec/api.md 8, `GET /v0/topics/:q/work`): the
shard's side (`held`, `stream_lease`) and the gateway's loop (gateway/work_stream.py).

Goal: the stream holds at most `max` live leases and asks the shard which it still holds
(acked ones free a slot), is woken by the queue's commit notification and not by its poll,
gives back every job it holds when it ends (also one whose claim was in flight), and ends
with the 409 `error` frame when the queue is gone.

Method: the shard parts on a ShardHarness with a hand-moved clock; the loop against a
scripted engine and a stand-in listener, its poll set to an hour so only a wake can move it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tools.testing.manual_clock import ManualClock
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.work_service import parse_work
from topics_actors.gateway.work_stream import WorkPlan, WorkStream
from topics_actors.protocol.messages import (
    Ack, Append, Claim, Held, Nack, Status, StreamLease,
)

pytestmark = pytest.mark.timeout(60)



# --- the shard: held, stream_lease -----------------------------------------------------------

@pytest.fixture
def q(env):
    clock = ManualClock()
    harness = env.single(clock=clock)
    harness.put("q", type="queue", lease_ms=1000)
    harness.call(Append("q", [[b"%d" % n, None, None, None] for n in (1, 2, 3)]))
    harness.clock = clock
    yield harness
    if harness.core is not None:
        harness.crash()


def test_held_names_the_jobs_still_leased_to_the_node_with_that_lease(q):
    jobs = q.call(Claim("q", "w", 3))["claimed"]
    ids = [job[1] for job in jobs]
    assert q.call(Held("q", "w", [1, 2, 3], ids))["held"] == [1, 2, 3]
    q.call(Ack("q", "w", [2]))
    assert q.call(Held("q", "w", [1, 2, 3], ids))["held"] == [1, 3]
    assert q.call(Held("q", "w", [1, 3], ["lease_99", ids[2]]))["held"] == [3]   # fenced
    assert q.call(Held("q", "other", [1, 3]))["held"] == []
    q.clock.now += 1001                                       # the leases ran out
    assert q.call(Held("q", "w", [1, 3]))["held"] == []
    assert q.call(Held("q", "w", []))["held"] == []


def test_held_checks_the_topic_first(q):
    q.put("log")
    replies = q.batch(Held("absent", "", []), Held("log", "", []), Held("q", "", []))
    assert [r.code for r in replies] == [ErrorCode.TOPIC_NOT_FOUND, ErrorCode.NOT_A_QUEUE,
                                         ErrorCode.INVALID_REQUEST]


def test_stream_leases_count_as_sse_streams_until_closed_or_expired(q):
    def streams() -> tuple[int, dict]:
        status = q.call(Status())
        return status["sse_streams"], status["sse_streams_by_owner"]
    assert streams() == (0, {})
    q.call(StreamLease("sse_a", "owner1", 1000))
    q.call(StreamLease("sse_b", "", 5000))
    assert streams() == (2, {"owner1": 1})
    q.call(StreamLease("sse_a", "owner1", 0, closed=True))
    assert streams() == (1, {})
    q.clock.now += 5001
    assert streams() == (0, {})


# --- the query -------------------------------------------------------------------------------

def test_the_query_is_node_max_and_lease_ms():
    assert parse_work("q", "node=w") == WorkPlan("q", "w", 1, None)
    assert parse_work("q", "node=w&max=0&lease_ms=500") == WorkPlan("q", "w", 1, 500)
    assert parse_work("q", "node=a%20b&max=5000").max == 1000
    for bad in ("", "node=", "max=2", "node=" + "n" * 129, "node=w&max=x",
                "node=w&lease_ms=-1", "node=w&max=%C2%B2"):
        with pytest.raises(TopicsError) as caught:
            parse_work("q", bad)
        assert caught.value.code is ErrorCode.INVALID_REQUEST


# --- the gateway's loop ----------------------------------------------------------------------

class Listener:
    def __init__(self):
        self.waiters: dict[str, set] = {}

    def watch(self, topic, wake):
        self.waiters.setdefault(topic, set()).add(wake)

    def unwatch(self, topic, wake):
        self.waiters.get(topic, set()).discard(wake)

    def wake(self, topic):
        for event in self.waiters.get(topic, ()):
            event.set()


class Queue:
    """A scripted queue shard: `ready` jobs are claimable; `gone` is its error."""

    def __init__(self, ready: int = 0):
        self.next_seq, self.ready, self.leases = 1, ready, {}
        self.sent: list = []
        self.gone: TopicsError | None = None
        self.claim_gate: asyncio.Event | None = None

    async def call(self, topic, msg, wait_ms=0):
        self.sent.append(msg)
        if self.gone is not None:
            raise self.gone
        if isinstance(msg, Held):
            return {"topic": topic, "held": [s for s, lease in zip(msg.seqs, msg.lease_ids)
                                             if self.leases.get(s) == lease]}
        if isinstance(msg, Nack):
            for seq in msg.seqs:
                self.leases.pop(seq, None)
            return {}
        assert isinstance(msg, Claim)
        if self.claim_gate is not None:
            await self.claim_gate.wait()
        jobs = []
        while self.ready and len(jobs) < msg.max:
            seq, self.ready, self.next_seq = self.next_seq, self.ready - 1, self.next_seq + 1
            self.leases[seq] = f"lease_{seq:x}"
            jobs.append([seq, self.leases[seq], 9, 7, b'{"d":%d}' % seq, None, 1, False])
        return {"topic": topic, "claimed": jobs, "count": len(jobs), "ready": self.ready}


class Loop:
    """A WorkStream over a Queue, read chunk by chunk."""

    def __init__(self, queue: Queue, max_jobs: int = 1, heartbeat_ms: int = 3_600_000):
        self.queue, self.listener, self.released, self.renewals = queue, Listener(), [], 0
        self.stream = WorkStream(WorkPlan("q", "w", max_jobs, None), queue, self.listener,
                                 heartbeat_ms, self._renew, self._release, lambda: False,
                                 poll_s=3600)
        self.chunks = self.stream.chunks()

    def _renew(self):
        self.renewals += 1

    def _release(self, held, claiming):
        self.released.append((held, claiming))

    async def next(self, timeout_s: float = 5) -> bytes:
        return await asyncio.wait_for(self.chunks.__anext__(), timeout_s)

    async def quiet(self) -> bool:
        """True if the stream sends nothing for a moment (it waits for a wake)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._pending()), 0.2)
        except asyncio.TimeoutError:
            return True
        return False

    def _pending(self):
        if not hasattr(self, "_task") or self._task.done():
            self._task = asyncio.ensure_future(self.chunks.__anext__())
        return self._task

    async def take(self, timeout_s: float = 5) -> bytes:
        return await asyncio.wait_for(self._pending(), timeout_s)


def jobs_of(chunk: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in chunk.split(b"\n") if line.startswith(b"data: ")]


def test_the_stream_holds_max_jobs_and_a_wake_brings_more():
    async def run():
        queue = Queue(ready=3)
        loop = Loop(queue, max_jobs=2)
        assert await loop.next() == b"retry: 2000\n\n"
        first = await loop.take()
        assert [j["$seq"] for j in jobs_of(first)] == [1, 2]
        assert first.startswith(b"event: job\nid: 1\ndata: ")
        assert jobs_of(first)[0] == {"topic": "q", "$seq": 1, "lease_id": "lease_1",
                                     "deadline": 9, "$ts": 7, "deliveries": 1, "data": 1}
        assert await loop.quiet()                   # holds 2 of 2: nothing more
        loop.listener.wake("q")
        assert await loop.quiet()                   # woken, still full
        del queue.leases[1]                         # the client acked job 1
        assert await loop.quiet()                   # no wake, no poll: nothing yet
        loop.listener.wake("q")
        assert [j["$seq"] for j in jobs_of(await loop.take())] == [3]
        held = [m for m in queue.sent if isinstance(m, Held)][-1]
        assert (held.node, sorted(held.seqs)) == ("w", [1, 2])
        await loop.chunks.aclose()
        assert loop.released == [({2: "lease_2", 3: "lease_3"}, None)]
    asyncio.run(run())


def test_a_gone_queue_ends_the_stream_with_the_409_frame():
    async def run():
        queue = Queue(ready=1)
        loop = Loop(queue)
        await loop.next()
        await loop.take()
        queue.gone = TopicsError("not a queue", ErrorCode.NOT_A_QUEUE, {"topic": "q"})
        loop.listener.wake("q")
        frame = await loop.take()
        assert frame == (b'event: error\ndata: {"code":409,"error":"topic is no longer a '
                         b'queue","topic":"q"}\n\n')
        with pytest.raises(StopAsyncIteration):
            await loop.next()
        assert loop.released == [({1: "lease_1"}, None)]
    asyncio.run(run())


def test_a_claim_in_flight_when_the_client_leaves_is_handed_to_the_release():
    async def run():
        queue = Queue(ready=1)
        queue.claim_gate = asyncio.Event()
        loop = Loop(queue)
        await loop.next()
        task = loop._pending()
        while not any(isinstance(m, Claim) for m in queue.sent):
            await asyncio.sleep(0)
        task.cancel()                               # the client went away
        with pytest.raises(asyncio.CancelledError):
            await task
        (held, claiming), = loop.released
        assert held == {} and claiming is not None
        queue.claim_gate.set()
        assert [job[0] for job in (await claiming)["claimed"]] == [1]
    asyncio.run(run())


def test_an_idle_stream_sends_heartbeats_and_renews_its_lease():
    async def run():
        loop = Loop(Queue(), heartbeat_ms=20)
        await loop.next()
        for _ in range(3):
            assert (await loop.take()).startswith(b": hb ")
        assert loop.renewals >= 2
        await loop.chunks.aclose()
        assert loop.released == [({}, None)]
    asyncio.run(run())
