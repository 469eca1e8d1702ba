"""Client load processes: asyncio producers driving `AsyncClient.append`.

A `WorkerPool` keeps N spawned processes for the whole benchmark. Each job names a time
window [start, end) on the system-wide monotonic clock: producers begin at once (warm-up),
and only acks that arrive inside the window are counted; latencies are those of requests
both sent and acked inside it.

A job drives the node of the pool's endpoint, or the one named by its `endpoint`, with
`append_options` given to every append (`acks` for replicated topics); a job with a
`redis_port` drives Redis instead: each request is `batch` pipelined XADDs, then
`WAIT <redis_wait_replicas> <redis_wait_ms>` when replicas are asked for.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing as mp
import signal
import time

import orjson

PAYLOAD_BYTES = 100
DRAIN_GRACE_S = 15.0


def make_record(index: int) -> dict:
    """One record whose `data` serialises to PAYLOAD_BYTES of compact JSON."""
    data = {"i": index, "k": "bench", "p": ""}
    data["p"] = "x" * max(0, PAYLOAD_BYTES - len(orjson.dumps(data)))
    return {"data": data}


async def _producer(send, count: int, job: dict, sink: dict) -> None:
    """Call `send()` (one request of `count` records) until the window ends."""
    start, end = job["start"], job["end"]
    latencies = sink["latencies"]
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            return
        try:
            reply = await send()
        except Exception as error:  # noqa: BLE001 - counted and reported, never fatal here
            sink["errors"] += 1
            sink["last_error"] = repr(error)[:300]
            continue
        t1 = time.monotonic()
        if start <= t1 < end:
            sink["max_gap_s"] = max(sink["max_gap_s"], t1 - max(sink["last_ack"], start))
            sink["last_ack"] = t1
            sink["records"] += count
            sink["requests"] += 1
            if t0 >= start:
                latencies.append(t1 - t0)
                perf = (reply or {}).get("performance") or {}
                sink["server_ms"].append(perf.get("server_total_ms", 0.0))
                sink["fsync_ms"].append(perf.get("fsync_ms", 0.0))


async def _cpu_probe(job: dict, sink: dict) -> None:
    await asyncio.sleep(max(0.0, job["start"] - time.monotonic()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, job["end"] - time.monotonic()))
    sink["cpu_s"] = time.process_time() - cpu0


def _new_sink() -> dict:
    return {"records": 0, "requests": 0, "errors": 0, "latencies": [], "server_ms": [],
            "fsync_ms": [], "cpu_s": 0.0, "last_error": "", "last_ack": 0.0, "max_gap_s": 0.0}


def _producer_topics(job: dict) -> list[str]:
    topics = job["topics"]
    first = job["first_producer"]
    return [topics[p % len(topics)] for p in range(first, first + job["producers"])]


async def _drive(sends: list, count: int, job: dict, sink: dict) -> dict:
    """Run one producer per `send` and the CPU probe; producers still busy DRAIN_GRACE_S
    after the window are cancelled and counted as stuck."""
    tasks = [asyncio.create_task(_producer(send, count, job, sink)) for send in sends]
    probe = asyncio.create_task(_cpu_probe(job, sink))
    limit = job["end"] - time.monotonic() + DRAIN_GRACE_S
    done, pending = await asyncio.wait([*tasks, probe], timeout=max(0.1, limit))
    for task in pending:
        task.cancel()
    sink["stuck_producers"] = len(pending)
    tail_gap = job["end"] - max(sink["last_ack"], job["start"])
    sink["max_gap_s"] = max(sink["max_gap_s"], tail_gap)
    await asyncio.gather(*pending, return_exceptions=True)
    return sink


async def run_job(endpoint: str, job: dict) -> dict:
    from topics_actors.client import AsyncClient

    if job.get("redis_port"):
        return await run_redis_job(job)
    records = [make_record(i) for i in range(job["batch"])]
    options = job.get("append_options") or {}
    linger = {"linger_ms": job.get("linger_ms", 0)}
    if job.get("linger_in_flight_max"):
        linger["linger_in_flight_max"] = job["linger_in_flight_max"]
    async with AsyncClient(job.get("endpoint") or endpoint, max_in_flight=job["max_in_flight"],
                           **linger) as client:
        sends = [functools.partial(client.append, topic, records, **options)
                 for topic in _producer_topics(job)]
        return await _drive(sends, len(records), job, _new_sink())


async def _redis_send(conn, commands: list[tuple], wait: tuple | None) -> dict:
    replies = await conn.pipeline(commands + ([wait] if wait else []))
    if wait and replies[-1] < wait[1]:
        raise TimeoutError(f"WAIT: {replies[-1]} of {wait[1]} replicas in {wait[2]} ms")
    return {}


async def run_redis_job(job: dict) -> dict:
    from resp_client import RespConnection   # a sibling module (tools/bench)

    value = orjson.dumps(make_record(0)["data"])
    wait = (("WAIT", job["redis_wait_replicas"], job["redis_wait_ms"])
            if job.get("redis_wait_replicas") else None)
    conns = [await RespConnection.open(job["redis_port"]) for _ in range(job["producers"])]
    try:
        sends = [functools.partial(_redis_send, conn,
                                   [("XADD", topic, "*", "d", value)] * job["batch"], wait)
                 for conn, topic in zip(conns, _producer_topics(job))]
        return await _drive(sends, job["batch"], job, _new_sink())
    finally:
        for conn in conns:
            await conn.close()


def worker_main(conn, endpoint: str) -> None:
    """Process entry: run jobs from the pipe until None arrives (Ctrl-C is the parent's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            result = asyncio.run(run_job(endpoint, job))
        except Exception as error:  # noqa: BLE001 - sent back to the parent, which reports it
            result = {"fatal": repr(error)[:500]}
        conn.send(result)


class WorkerPool:
    """N client processes (spawned, so no ZeroMQ state is inherited across fork)."""

    def __init__(self, endpoint: str, processes: int):
        ctx = mp.get_context("spawn")
        self.workers = []
        for _ in range(processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, endpoint), daemon=True)
            proc.start()
            child.close()
            self.workers.append((proc, parent))
        self.busy = False

    def __len__(self) -> int:
        return len(self.workers)

    def submit(self, jobs: list[dict]) -> None:
        for (_, conn), job in zip(self.workers, jobs):
            conn.send(job)
        self.busy = True

    def collect(self, deadline: float) -> list[dict]:
        results = []
        for proc, conn in self.workers:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"client process {proc.pid} did not report in time")
            results.append(conn.recv())
        self.busy = False
        return results

    def close(self) -> None:
        """Stop the workers; a job still running is awaited (its result read and dropped,
        so no worker stays blocked writing it to a full pipe), then None ends each loop."""
        deadline = time.monotonic() + DRAIN_GRACE_S + 5
        for proc, conn in self.workers:
            try:
                if self.busy and conn.poll(max(0.0, deadline - time.monotonic())):
                    conn.recv()
                conn.send(None)
            except (OSError, EOFError):
                pass
        for proc, conn in self.workers:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
