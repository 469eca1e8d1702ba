"""The soak's load: one spawned process running asyncio tasks against a node until told to
stop, then sending back what it did.

- producers: each its own AsyncClient (so its own client session, as separate programs
  would be), appending batches of `batch` records of about `record_bytes` to its share of
  the capped log topics of every durability class and to the queues;
- deletes: by seq below (the oldest tenth of a full topic) and by tag (`drop`, one record
  in four of the tagged topics), on a rotating topic;
- watchers: `watchers` at a time, each a watch session on one to three log topics (tail)
  whose SSE stream is read for a few seconds, then dropped for a new one;
- workers: `workers` at a time on the queues' `/work` streams, acking what they get
  (over ZeroMQ) and leaving after a few seconds, which gives back what they held;
- routers: each router copies a log topic into a capped topic of its own and is deleted and
  created again every few seconds;
- churn: one topic deleted and created again every few seconds, a few batches in between.
Checkpoints and retention are the node's own (its compactor and reclaimer).

Errors are counted by code. Expected ones (a 429 under load; a churned topic or router
that is gone) are tallied; anything else fails the soak.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import traceback

import orjson

from topics_actors.client import AsyncClient, TopicsError
from tools.soak.soak_plan import SoakPlan

EXPECTED_CODES = {"throttled", "topic_not_found", "router_not_found", "not_a_queue"}
CHUNK_BYTES = 65536


class Tally:
    """What the load did; sent back to the soak as a dict."""

    def __init__(self):
        self.counts = {"appended": 0, "deletes": 0, "watch_sessions": 0, "watch_bytes": 0,
                       "jobs_acked": 0, "work_streams": 0, "router_churns": 0,
                       "topic_churns": 0}
        self.errors: dict[str, int] = {}
        self.unexpected: list[str] = []

    def error(self, error: BaseException) -> None:
        code = error.code.wire if isinstance(error, TopicsError) else type(error).__name__
        self.errors[code] = self.errors.get(code, 0) + 1
        if code not in EXPECTED_CODES and len(self.unexpected) < 20:
            self.unexpected.append(f"{code}: {str(error)[:200]}")

    def as_dict(self) -> dict:
        return {**self.counts, "errors": self.errors, "unexpected": self.unexpected}


def record_batch(plan: SoakPlan, tagged: bool, n: int) -> list[dict]:
    pad = "x" * max(0, plan.record_bytes - 30)
    if not tagged:
        return [{"data": {"n": n, "k": k, "p": pad}} for k in range(plan.batch)]
    return [{"data": {"n": n, "k": k, "p": pad}, "tag": "drop" if k % 4 == 0 else "keep"}
            for k in range(plan.batch)]


class LoadMix:
    def __init__(self, plan: SoakPlan, endpoint: str, http_port: int, stopped):
        self.plan = plan
        self.endpoint = endpoint
        self.http_port = http_port
        self.stopped = stopped            # a multiprocessing Event
        self.rng = random.Random(plan.seed)
        self.tally = Tally()
        self.admin: AsyncClient | None = None

    def running(self) -> bool:
        return not self.stopped.is_set()

    async def guarded(self, coro_fn, *args) -> None:
        """Run one task's loop; an error is counted and the loop goes on after a pause."""
        while self.running():
            try:
                await coro_fn(*args)
            except (TopicsError, OSError, asyncio.TimeoutError, ValueError) as error:
                self.tally.error(error)
                await asyncio.sleep(0.2)

    async def run(self) -> dict:
        self.admin = AsyncClient(self.endpoint, request_timeout_ms=10_000)
        plan = self.plan
        tasks = [self.guarded(self.produce, i) for i in range(plan.producers)]
        tasks += [self.guarded(self.delete_some)]
        tasks += [self.guarded(self.watch, i) for i in range(plan.watchers)]
        tasks += [self.guarded(self.work, i) for i in range(plan.workers)]
        tasks += [self.guarded(self.churn_router, i) for i in range(plan.routers)]
        tasks += [self.guarded(self.churn_topic)]
        await asyncio.gather(*tasks)
        await self.admin.close()
        return self.tally.as_dict()

    # --- producers and deletes -----------------------------------------------------------

    async def produce(self, index: int) -> None:
        plan = self.plan
        topics = plan.producer_topics(index)
        client = AsyncClient(self.endpoint, request_timeout_ms=10_000)
        try:
            for n in itertools.count():
                if not self.running():
                    return
                name, tagged = topics[n % len(topics)]
                await client.append(name, record_batch(plan, tagged, n))
                self.tally.counts["appended"] += plan.batch
                if plan.produce_pause_s:
                    await asyncio.sleep(plan.produce_pause_s)
        finally:
            await client.close()

    async def delete_some(self) -> None:
        plan = self.plan
        logs = plan.log_topics()
        for n in itertools.count():
            await self.pause(plan.delete_every_s)
            if not self.running():
                return
            name, tagged = logs[n % len(logs)]
            if tagged:
                await self.admin.delete_records(name, match="drop")
            else:
                head = (await self.admin.get_topic(name, touch=False))["head_seq"]
                # the oldest tenth of a full topic: retained stays near the caps' sum
                await self.admin.delete_records(name, before_seq=max(1, head - plan.cap
                                                                     * 9 // 10))
            self.tally.counts["deletes"] += 1

    async def pause(self, seconds: float) -> None:
        """Sleep up to `seconds`, in short steps so a stop is seen soon."""
        deadline = time.monotonic() + seconds
        while self.running() and time.monotonic() < deadline:
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    # --- watchers and workers --------------------------------------------------------------

    async def watch(self, index: int) -> None:
        logs = [name for name, _ in self.plan.log_topics()]
        rng = random.Random(self.plan.seed * 1000 + index)
        while self.running():
            names = rng.sample(logs, min(len(logs), rng.randint(1, 3)))
            body = {"topics": {name: {"tail": True} for name in names}, "heartbeat_ms": 1000}
            status, reply = await http_json(self.http_port, "POST", "/v0/watch", body)
            if status != 200:
                raise ValueError(f"POST /v0/watch answered {status}: {reply}")
            self.tally.counts["watch_sessions"] += 1
            seconds = rng.uniform(*self.plan.visit_s)
            async for chunk in sse_chunks(self.http_port, f"/v0/watch/{reply['wid']}",
                                          seconds, self.running):
                self.tally.counts["watch_bytes"] += len(chunk)

    async def work(self, index: int) -> None:
        queues = self.plan.queue_topics()
        rng = random.Random(self.plan.seed * 2000 + index)
        while self.running():
            queue, node = rng.choice(queues), f"w{index}"
            path = f"/v0/topics/{queue}/work?node={node}&max=50&lease_ms=30000"
            self.tally.counts["work_streams"] += 1
            pending, text = [], b""
            async for chunk in sse_chunks(self.http_port, path, rng.uniform(*self.plan.visit_s),
                                          self.running):
                text += chunk
                lines = text.split(b"\n")
                text = lines.pop()
                for line in lines:
                    if line.startswith(b"data: "):
                        pending.append(job_seq(orjson.loads(line[6:])))
                if pending:
                    await self.admin.ack(queue, node, pending)
                    self.tally.counts["jobs_acked"] += len(pending)
                    pending = []

    # --- routers and topic churn -----------------------------------------------------------

    async def churn_router(self, index: int) -> None:
        plan = self.plan
        source = plan.log_topics()[index % len(plan.log_topics())][0]
        dest, name = f"soak-dest-{index}", f"soak-router-{index}"
        await self.admin.put_topic(dest, cap_records=plan.cap, durability="disk")
        while self.running():
            await self.admin.put_router(name, source, dest)
            await self.pause(plan.router_life_s)
            await self.admin.delete_router(name)
            self.tally.counts["router_churns"] += 1

    async def churn_topic(self) -> None:
        plan = self.plan
        for n in itertools.count():
            if not self.running():
                return
            name = "soak-churn"
            await self.admin.put_topic(name, cap_records=plan.cap, durability="fsync")
            for k in range(5):
                await self.admin.append(name, record_batch(plan, False, k))
            await self.pause(plan.churn_every_s)
            await self.admin.delete_topic(name)
            self.tally.counts["topic_churns"] += 1


def job_seq(event: dict) -> int:
    """The seq of a `job` event; an `error` event (a queue gone) raises."""
    if "$seq" not in event:
        raise ValueError(f"the work stream sent {event}")
    return event["$seq"]


# --- HTTP over asyncio streams ---------------------------------------------------------------

async def http_json(port: int, method: str, path: str, body) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        payload = orjson.dumps(body)
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                     f"\r\n".encode() + payload)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, text = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), orjson.loads(text) if text else {}


async def sse_chunks(port: int, path: str, seconds: float, running):
    """The de-chunked body bytes of an SSE GET, for `seconds` (or until the server ends it,
    or `running()` turns false); the connection is closed at the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline, task = time.monotonic() + seconds, None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        status = int(head.split()[1])
        if status != 200:
            raise ValueError(f"GET {path.split('?')[0]} answered {status}")
        chunked = b"chunked" in head.lower()
        while running() and time.monotonic() < deadline:
            # a read is never cancelled midway (a chunk's size read without its bytes would
            # lose the framing): an unfinished one is awaited again on the next pass
            task = task or asyncio.ensure_future(_next_chunk(reader, chunked))
            done, _ = await asyncio.wait({task}, timeout=0.5)
            if not done:
                continue
            chunk, task = task.result(), None
            if not chunk:
                return
            yield chunk
    finally:
        if task is not None:
            task.cancel()
        writer.close()


async def _next_chunk(reader: asyncio.StreamReader, chunked: bool) -> bytes:
    if not chunked:
        return await reader.read(CHUNK_BYTES)
    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
    if size == 0:
        return b""
    data = await reader.readexactly(size + 2)
    return data[:-2]


def load_main(plan: SoakPlan, endpoint: str, http_port: int, stopped, conn) -> None:
    """The load process: run until `stopped` is set, then send the tally over `conn`."""
    try:
        tally = asyncio.run(LoadMix(plan, endpoint, http_port, stopped).run())
    except BaseException:  # noqa: BLE001 - the soak reports it; the process ends anyway
        tally = {"crashed": traceback.format_exc()[-2000:]}
    conn.send(tally)
    conn.close()
