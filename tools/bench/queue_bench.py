"""Queue throughput: claim + ack cycles per second, leases durable or in memory, side by side
with a Redis Streams consumer group (XREADGROUP + XACK) in the same run.

    python tools/bench/queue_bench.py [--runs 3] [--workers 8] [--batches 1,64]
                                      [--jobs 1:6000,64:150000] [--client-procs 2] [--no-redis]
                                      [--leases durable,memory] [--pipelined]

One case = a fresh queue preloaded with a fixed number of 100-byte jobs, then `--workers`
workers (split over `--client-procs` spawned processes, asyncio) that each loop: claim up to
`--batch` jobs, ack them, until a claim comes back empty. jobs/s = jobs / (last worker done -
go); a cycle's latency is claim sent -> ack answered. topics: one node (1 shard), the queue
`fsync` class, with `leases_durable` (every claim and ack is logged and fsynced before its
answer) or leases in memory (acks logged and fsynced, claims not), the ZeroMQ AsyncClient.
`--pipelined`: the ack of a claim's jobs goes with the next claim, on both sides (one
message of the AsyncClient, so one batch of the shard; one Redis pipeline). Redis:
redis-server on a free port in a temp dir with
`appendonly yes`, `appendfsync always`, the stream preloaded and a group created at 0, the
workers on this repository's minimal RESP client (tools/bench/resp_client.py), XACK without
XDEL (the entries stay in the stream, as Redis queues usually run). Each run measures every
batch size on both; the report gives medians over the runs and same-run ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import pathlib
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Importing http_bench puts this checkout first on sys.path and PYTHONPATH, so the node runs
# this checkout's code even where another one is installed.
import http_bench  # noqa: E402,F401
import redis_peer  # noqa: E402  (sibling modules of this script)
from bench_stats import fmt_rate, latency_summary, paired_ratios, spread  # noqa: E402
from node_proc import NodeProcess  # noqa: E402
from resp_client import RespConnection  # noqa: E402

log = logging.getLogger(__name__)
DATA = {"job": "x" * 88}             # 100 bytes of compact JSON
LEASE_MS = 60_000
PRELOAD_BATCH = 1000
READY_TIMEOUT_S = 60
CASE_TIMEOUT_S = 300


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", type=int, default=8, help="claim+ack workers, both sides")
    p.add_argument("--client-procs", type=int, default=2)
    p.add_argument("--batches", default="1,64", help="claim max / XREADGROUP COUNT")
    p.add_argument("--jobs", default="1:6000,64:150000", help="jobs per case, by batch")
    p.add_argument("--leases", default="durable,memory",
                   help="topics' queue leases: durable (leases_durable, every claim logged "
                        "and fsynced) and/or memory")
    p.add_argument("--pipelined", action="store_true",
                   help="each worker sends the ack of its jobs with its next claim (both "
                        "sides: one message / one Redis pipeline)")
    p.add_argument("--no-redis", action="store_true")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args(argv)
    args.leases = [x for x in args.leases.split(",") if x]
    args.batches = [int(b) for b in args.batches.split(",") if b]
    jobs = dict(pair.split(":") for pair in args.jobs.split(",") if pair)
    args.jobs = {b: int(jobs.get(str(b), 2000 * b)) for b in args.batches}
    return args


# --- worker processes -------------------------------------------------------------------------

def _took(sink: dict, acked: int, asked: int, t0: float) -> None:
    sink["latencies"].append(time.monotonic() - t0)
    sink["acked"] += acked
    sink["skipped"] += asked - acked


async def _topics_worker(client, queue: str, name: str, batch: int, sink: dict,
                         pipelined: bool) -> None:
    """claim, ack, claim, ack...; pipelined: the ack of one claim's jobs and the next claim
    go together (one message, so one batch of the shard: one WAL write, one fsync)."""
    claim = lambda: client.claim(queue, name, max=batch, lease_ms=LEASE_MS)   # noqa: E731
    ack = lambda jobs: client.ack(queue, name, [j["$seq"] for j in jobs],      # noqa: E731
                                  [j["lease_id"] for j in jobs])
    t0, jobs = time.monotonic(), (await claim())["claimed"]
    while jobs:
        if pipelined:
            acked, claimed = await asyncio.gather(ack(jobs), claim())
        else:
            acked, claimed = await ack(jobs), await claim()
        _took(sink, acked["acked"], len(jobs), t0)
        t0, jobs = time.monotonic(), claimed["claimed"]


async def _redis_worker(port: int, stream: str, name: str, batch: int, sink: dict,
                        pipelined: bool) -> None:
    """The same loop on a consumer group: XREADGROUP, XACK (in one write when pipelined)."""
    read = ("XREADGROUP", "GROUP", "g", name, "COUNT", batch, "STREAMS", stream, ">")
    conn = await RespConnection.open(port)
    try:
        t0, reply = time.monotonic(), await conn.call(*read)
        while reply and reply[0][1]:
            entries = reply[0][1]
            ack = ("XACK", stream, "g", *(entry[0] for entry in entries))
            if pipelined:
                acked, reply = await conn.pipeline([ack, read])
            else:
                acked, reply = await conn.call(*ack), await conn.call(*read)
            _took(sink, acked, len(entries), t0)
            t0 = time.monotonic()
    finally:
        await conn.close()


async def _workers(case: dict, index: int, ready, go) -> dict:
    sink = {"acked": 0, "skipped": 0, "latencies": []}
    names = [f"w{index}-{i}" for i in range(case["workers"])]
    client = None
    if case["kind"] == "topics":
        from topics_actors.client import AsyncClient
        client = AsyncClient(case["endpoint"], request_timeout_ms=30_000)
        await client.get_topic(case["queue"])            # connected before the go
        work = [_topics_worker(client, case["queue"], n, case["batch"], sink,
                               case["pipelined"]) for n in names]
    else:
        work = [_redis_worker(case["port"], case["queue"], n, case["batch"], sink,
                              case["pipelined"]) for n in names]
    ready.put(index)
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    try:
        await asyncio.gather(*work)
    finally:
        if client is not None:
            await client.close()
    sink["done_s"] = time.monotonic()
    return sink


def worker_main(case: dict, index: int, ready, go, results) -> None:
    results.put(asyncio.run(_workers(case, index, ready, go)))


def run_case(case: dict, procs: int) -> dict:
    """Start the worker processes, let them go together, gather what they counted."""
    ctx = mp.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    shares = [case["workers"] // procs + (i < case["workers"] % procs) for i in range(procs)]
    children = [ctx.Process(target=worker_main, args=(dict(case, workers=n), i, ready, go,
                                                      results), daemon=True)
                for i, n in enumerate(shares) if n]
    for child in children:
        child.start()
    try:
        for _ in children:
            ready.get(timeout=READY_TIMEOUT_S)
        go_s = time.monotonic()
        go.set()
        sinks = [results.get(timeout=CASE_TIMEOUT_S) for _ in children]
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
    acked = sum(s["acked"] for s in sinks)
    elapsed = max(s["done_s"] for s in sinks) - go_s
    return {"kind": case["kind"], "batch": case["batch"], "jobs": case["jobs"],
            "acked": acked, "skipped": sum(s["skipped"] for s in sinks),
            "jobs_per_s": acked / elapsed, "elapsed_s": elapsed,
            **latency_summary(x for s in sinks for x in s["latencies"])}


# --- the two sides ----------------------------------------------------------------------------

def topics_case(node: NodeProcess, run: int, batch: int, leases: str, args) -> dict:
    queue = f"bench-q-{run}-{batch}-{leases}"
    client = node.client
    client.put_topic(queue, type="queue", durability="fsync",
                     leases_durable=leases == "durable")
    jobs = args.jobs[batch]
    for start in range(0, jobs, PRELOAD_BATCH):
        client.append(queue, [{"data": DATA}] * min(PRELOAD_BATCH, jobs - start))
    result = run_case({"kind": "topics", "endpoint": node.endpoint, "queue": queue,
                       "batch": batch, "jobs": jobs, "workers": args.workers,
                       "pipelined": args.pipelined}, args.client_procs)
    left = client.get_topic(queue, touch=False)
    result["left"], result["leases"] = left["count"], leases
    client.delete_topic(queue)
    return result


async def _redis_preload(port: int, stream: str, jobs: int) -> None:
    conn = await RespConnection.open(port)
    try:
        value = json.dumps(DATA, separators=(",", ":"))
        for start in range(0, jobs, PRELOAD_BATCH):
            count = min(PRELOAD_BATCH, jobs - start)
            for _ in range(count):       # pipelined: all sent, then all answers read
                conn.writer.write(b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nd\r\n"
                                  b"$%d\r\n%s\r\n" % (len(stream), stream.encode(),
                                                      len(value), value.encode()))
            for _ in range(count):
                await conn.read_reply()
        await conn.call("XGROUP", "CREATE", stream, "g", "0")
    finally:
        await conn.close()


async def _redis_left(port: int, stream: str) -> int:
    conn = await RespConnection.open(port)
    try:
        return (await conn.call("XPENDING", stream, "g"))[0]
    finally:
        await conn.close()


def redis_case(run: int, batch: int, args) -> dict:
    stream = f"bench-q-{run}-{batch}"
    with redis_peer.RedisServer("always") as server:
        asyncio.run(_redis_preload(server.port, stream, args.jobs[batch]))
        result = run_case({"kind": "redis", "port": server.port, "queue": stream,
                           "batch": batch, "jobs": args.jobs[batch],
                           "workers": args.workers, "pipelined": args.pipelined},
                          args.client_procs)
        result["left"] = asyncio.run(_redis_left(server.port, stream))
    return result


def run(args) -> list[dict]:
    results = []
    with NodeProcess(1) as node:
        for run_index in range(args.runs):
            for batch in args.batches:
                for leases in args.leases:
                    results.append(dict(topics_case(node, run_index, batch, leases, args),
                                        run=run_index))
                    log.info("%s", results[-1])
                if not args.no_redis:
                    results.append(dict(redis_case(run_index, batch, args), run=run_index))
                    log.info("%s", results[-1])
    return results


# --- the report -------------------------------------------------------------------------------

def report(results: list[dict], args) -> str:
    lines = [f"claim+ack, {args.workers} workers over {args.client_procs} client processes, "
             f"{args.runs} run(s){', pipelined' if args.pipelined else ''}; topics: 1 shard, "
             "fsync class, leases durable or in memory; Redis streams: appendfsync always, "
             "XREADGROUP + XACK", "",
             "| side | claim max | jobs | jobs/s, median (min-max) | cycle p50 ms | "
             "cycle p99 ms | all acked |", "|---|---:|---:|---|---:|---:|---|"]
    sides = [(f"topics, {leases} leases", "topics", leases) for leases in args.leases]
    for batch in args.batches:
        for label, kind, leases in sides + [("redis", "redis", None)]:
            rows = [r for r in results if r["kind"] == kind and r["batch"] == batch
                    and r.get("leases") == leases]
            if not rows:
                continue
            rate = spread(r["jobs_per_s"] for r in rows)
            p50, p99 = (spread(r[k] for r in rows)["median"] for k in ("p50_ms", "p99_ms"))
            complete = all(r["acked"] == r["jobs"] and r["left"] == 0 for r in rows)
            lines.append(f"| {label} | {batch} | {args.jobs[batch]:,} | "
                         f"{fmt_rate(rate['median'])}"
                         f" ({fmt_rate(rate['min'])}-{fmt_rate(rate['max'])}) | {p50:.2f} | "
                         f"{p99:.2f} | {complete} |")
    lines += ["", *ratio_lines(results, args)]
    return "\n".join(lines)


def ratio_lines(results: list[dict], args) -> list[str]:
    out = []
    for batch in args.batches:
        peer = [r["jobs_per_s"] for r in results if r["kind"] == "redis" and r["batch"] == batch]
        for leases in args.leases:
            ours = [r["jobs_per_s"] for r in results if r["kind"] == "topics"
                    and r["batch"] == batch and r["leases"] == leases]
            if ours and len(peer) == len(ours):
                ratios = paired_ratios(ours, peer)
                out.append(f"- claim max {batch}, {leases} leases: topics / Redis jobs/s = "
                           f"{spread(ratios)['median']:.2f}x (runs: "
                           f"{', '.join(f'{r:.2f}' for r in ratios)})")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    if not args.no_redis and not shutil.which("redis-server"):
        log.warning("redis-server not found: the Redis side is skipped (install "
                    "redis-server to measure it)")
        args.no_redis = True
    results = run(args)
    print(report(results, args))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
