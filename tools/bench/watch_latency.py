"""The latency mode of watch_bench.py: record-to-watcher latency at 1..1000 watchers, topics
watch streams beside Redis XREAD BLOCK clients on the same load, in the same run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import multiprocessing as mp
import os
import resource
import time
from array import array

import redis_peer  # sibling modules of watch_bench.py
from bench_stats import paired_ratios, percentile, spread
from node_proc import NodeProcess
from resp_client import RespConnection
from watch_readers import reader_main

from topics_actors.client import AsyncClient

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 300
DRAIN_TIMEOUT_S = 60
FDS_PER_WATCHER = 4             # the watcher's socket, the gateway's, the session POST, slack


def raise_fd_limit(watchers: int) -> None:
    """1000 watchers are 1000 sockets here and 1000 in the gateway (which inherits this
    limit through the node): lift the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, watchers * FDS_PER_WATCHER + 1024))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < watchers * 2 + 256:
        log.warning("RLIMIT_NOFILE hard limit %d is low for %d watchers", hard, watchers)


async def _append_at_rate(send, count: int, rate: float) -> None:
    t0 = time.monotonic()
    for i in range(count):
        wait_s = t0 + i / rate - time.monotonic()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        await send(time.monotonic_ns())


async def _topics_appends(endpoint: str, topic: str, count: int, rate: float) -> None:
    async with AsyncClient(endpoint) as client:
        await _append_at_rate(lambda ns: client.append(topic, [{"data": {"s": ns}}]),
                              count, rate)


async def _redis_appends(port: int, stream: str, count: int, rate: float) -> None:
    conn = await RespConnection.open(port)
    try:
        await _append_at_rate(lambda ns: conn.call("XADD", stream, "*", "s", ns), count, rate)
    finally:
        await conn.close()


async def _blocked_clients(port: int) -> int:
    conn = await RespConnection.open(port)
    try:
        info = (await conn.call("INFO", "clients")).decode()
    finally:
        await conn.close()
    return int(info.split("blocked_clients:")[1].split()[0])


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout_s} s")
        time.sleep(0.05)


def latency_case(side: str, port: int, topic: str, watchers: int, args, appends) -> dict:
    """Start the watcher processes, wait until every watcher listens, run the appends,
    wait until every record reached every watcher, then gather the latencies."""
    ctx = mp.get_context("spawn")
    ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = min(args.reader_procs, watchers)
    shares = [watchers // procs + (i < watchers % procs) for i in range(procs)]
    taken = [ctx.Value("q", 0, lock=False) for _ in shares]
    children = [ctx.Process(target=reader_main, daemon=True,
                            args=(side, port, topic, n, ready, counter, stop, results))
                for n, counter in zip(shares, taken)]
    count = int(args.rate * args.seconds)
    try:
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=READY_TIMEOUT_S)
        if side == "redis":
            _wait(lambda: asyncio.run(_blocked_clients(port)) >= watchers, READY_TIMEOUT_S,
                  "Redis watchers not all blocked")
        asyncio.run(appends(count))
        with contextlib.suppress(TimeoutError):
            _wait(lambda: sum(t.value for t in taken) >= count * watchers, DRAIN_TIMEOUT_S,
                  "records missing")
        stop.set()
        tallies = [t for _ in children for t in results.get(timeout=READY_TIMEOUT_S)]
    finally:
        stop.set()
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
    return _summary(side, watchers, count, tallies)


def _summary(side: str, watchers: int, count: int, tallies: list) -> dict:
    samples = array("q")
    for _, raw in tallies:
        samples.frombytes(raw)
    ordered = sorted(samples)
    return {"side": side, "watchers": watchers, "appended": count,
            "complete": all(records == count for records, _ in tallies),
            "p50_ms": percentile(ordered, 50) / 1e6, "p99_ms": percentile(ordered, 99) / 1e6,
            "max_ms": (ordered[-1] / 1e6) if ordered else float("nan"),
            "samples": len(ordered)}


def one_run(run_index: int, args) -> list[dict]:
    out = []
    peer = (contextlib.nullcontext() if args.no_redis
            else redis_peer.RedisServer("always"))
    with NodeProcess(1) as node, peer as redis:
        port = json.load(open(os.path.join(node.tmp, "ports.json")))["http"]
        for watchers in args.watchers:
            topic = f"latency-{run_index}-{watchers}"
            node.client.put_topic(topic, durability=args.durability)
            out.append(latency_case("topics", port, topic, watchers, args, lambda n: (
                _topics_appends(node.endpoint, topic, n, args.rate))))
            log.info("%s", out[-1])
            if redis is not None:
                out.append(latency_case("redis", redis.port, topic, watchers, args,
                                        lambda n: _redis_appends(redis.port, topic, n,
                                                                 args.rate)))
                log.info("%s", out[-1])
    return [dict(r, run=run_index) for r in out]


def run(args) -> list[dict]:
    raise_fd_limit(max(args.watchers))
    return [r for run_index in range(args.runs) for r in one_run(run_index, args)]


def report(results: list[dict], args) -> str:
    lines = [f"record-to-watcher latency, {args.rate:g} appends/s of 1 record for "
             f"{args.seconds:g} s, {args.runs} run(s); topics: 1 shard, {args.durability} "
             "topic, 1 gateway; Redis: appendfsync always, XREAD BLOCK; watchers over "
             f"{args.reader_procs} reader processes", "",
             "| watchers | topics p50 ms | topics p99 ms | Redis p50 ms | Redis p99 ms | "
             "p50 topics/Redis | p99 topics/Redis | complete |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    for watchers in args.watchers:
        ours = [r for r in results if r["side"] == "topics" and r["watchers"] == watchers]
        peer = [r for r in results if r["side"] == "redis" and r["watchers"] == watchers]
        cells = [f"{spread(r[k] for r in rows)['median']:.2f}" if rows else "n/a"
                 for k in ("p50_ms", "p99_ms") for rows in (ours, peer)]
        cells = [cells[0], cells[2], cells[1], cells[3]]
        ratios = [spread(paired_ratios([r[k] for r in ours], [r[k] for r in peer]))["median"]
                  if peer else float("nan") for k in ("p50_ms", "p99_ms")]
        complete = all(r["complete"] for r in ours + peer)
        lines.append(f"| {watchers} | {' | '.join(cells)} | {ratios[0]:.2f}x | "
                     f"{ratios[1]:.2f}x | {complete} |")
    return "\n".join(lines)
