"""Client load processes: asyncio producers driving `AsyncClient.append`.

A `WorkerPool` keeps N spawned processes for the whole benchmark. Each job names a time
window [start, end) on the system-wide monotonic clock: producers begin at once (warm-up),
and only acks that arrive inside the window are counted; latencies are those of requests
both sent and acked inside it.
"""

from __future__ import annotations

import asyncio
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


async def _producer(client, topic: str, records: list[dict], job: dict, sink: dict) -> None:
    start, end = job["start"], job["end"]
    latencies, count = sink["latencies"], len(records)
    while True:
        t0 = time.monotonic()
        if t0 >= end:
            return
        try:
            reply = await client.append(topic, records)
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
                perf = reply.get("performance") or {}
                sink["server_ms"].append(perf.get("server_total_ms", 0.0))
                sink["fsync_ms"].append(perf.get("fsync_ms", 0.0))


async def _cpu_probe(job: dict, sink: dict) -> None:
    await asyncio.sleep(max(0.0, job["start"] - time.monotonic()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, job["end"] - time.monotonic()))
    sink["cpu_s"] = time.process_time() - cpu0


async def run_job(endpoint: str, job: dict) -> dict:
    from topics_actors.client import AsyncClient

    sink = {"records": 0, "requests": 0, "errors": 0, "latencies": [], "server_ms": [],
            "fsync_ms": [], "cpu_s": 0.0, "last_error": "",
            "last_ack": 0.0, "max_gap_s": 0.0}
    records = [make_record(i) for i in range(job["batch"])]
    topics = job["topics"]
    async with AsyncClient(endpoint, max_in_flight=job["max_in_flight"],
                           linger_ms=job.get("linger_ms", 0)) as client:
        tasks = [asyncio.create_task(_producer(client, topics[p % len(topics)], records,
                                               job, sink))
                 for p in range(job["first_producer"], job["first_producer"] + job["producers"])]
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
