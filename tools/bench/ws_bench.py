"""Record-to-subscriber latency over a WebSocket (`GET /v0/ws`) against an SSE watch stream.

    python tools/bench/ws_bench.py [--subscribers 1,16] [--seconds 3] [--batch 10]
                                   [--interval-ms 5] [--runs 3]

A node with 1 shard and 1 gateway process; one topic; N subscribers of one transport (N
watch sessions with an SSE stream each, or N WebSockets subscribed with `tail`), read by
asyncio in this process; one ZeroMQ AsyncClient appends a batch of `--batch` records of
100 bytes every `--interval-ms` (paced, so the figures are latency, not a saturated
queue), for `--seconds`. Per run: the latency from a record's `$ts` (its commit, server
clock, ms resolution) to its arrival, p50 and p99 over the last record of every frame, and
the records delivered per second over all subscribers. Each (transport, N) runs `--runs`
times on a fresh node, alternating transports; the table shows the medians. Markdown on
stdout; see docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time

import orjson
from websockets.asyncio.client import connect

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# watch_bench (through http_bench) puts this checkout first on sys.path and PYTHONPATH.
from watch_bench import DATA, Watcher, bench_main  # noqa: E402  (siblings)
from watch_readers import http_json  # noqa: E402
from bench_stats import latency_summary, spread  # noqa: E402
from node_proc import NodeProcess  # noqa: E402

from topics_actors.client import AsyncClient  # noqa: E402

log = logging.getLogger(__name__)
TOPIC = "ws-bench"
TRANSPORTS = ("sse", "ws")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subscribers", default="1,16")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args(argv)
    args.subscribers = [int(n) for n in args.subscribers.split(",") if n]
    return args


class WsWatcher(Watcher):
    """One WebSocket subscribed to the topic's tail; counts records and samples latency
    like the SSE Watcher."""

    async def run(self, port: int, url: str) -> None:
        async with connect(f"ws://127.0.0.1:{port}/v0/ws", max_size=None) as socket:
            await socket.send(orjson.dumps({"op": "subscribe", "topic": TOPIC,
                                             "tail": True}).decode())
            async for message in socket:
                if message.startswith('{"op":"record"'):
                    self._data(message.encode())
                elif message.startswith('{"op":"caught_up"'):
                    self.ready.set()


async def _subscribers(port: int, transport: str, count: int) -> tuple[list, list]:
    watchers, tasks = [], []
    for _ in range(count):
        if transport == "sse":
            session = await http_json(port, "POST", "/v0/watch",
                                  {"topics": {TOPIC: {"tail": True}}})
            watcher, url = Watcher(), session["stream_url"]
        else:
            watcher, url = WsWatcher(), "/v0/ws"
        watchers.append(watcher)
        tasks.append(asyncio.ensure_future(watcher.run(port, url)))
    await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in watchers)), 30)
    return watchers, tasks


async def one_case(port: int, endpoint: str, transport: str, count: int, args) -> dict:
    watchers, tasks = await _subscribers(port, transport, count)
    appended = 0
    async with AsyncClient(endpoint) as client:
        records = [{"data": DATA}] * args.batch
        t0 = time.monotonic()
        next_s = t0
        while time.monotonic() - t0 < args.seconds:
            await client.append(TOPIC, records)
            appended += args.batch
            next_s += args.interval_ms / 1000
            await asyncio.sleep(max(0.0, next_s - time.monotonic()))
        deadline = time.monotonic() + 10
        while (sum(w.records for w in watchers) < appended * count
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)
        drained_s = time.monotonic() - t0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    delivered = sum(w.records for w in watchers)
    samples = [s for w in watchers for s in w.latencies_s]
    return {"transport": transport, "subscribers": count,
            "delivered_per_s": delivered / drained_s,
            "complete": delivered == appended * count, **latency_summary(samples)}


def run(args) -> list[dict]:
    os.environ["TOPICS_GATEWAY_WORKERS"] = "1"
    results = []
    for count in args.subscribers:
        for _ in range(args.runs):
            for transport in TRANSPORTS:          # alternate, so drift hits both
                with NodeProcess(1) as node:
                    port = json.load(open(os.path.join(node.tmp, "ports.json")))["http"]
                    node.client.put_topic(TOPIC)
                    results.append(asyncio.run(one_case(port, node.endpoint, transport,
                                                        count, args)))
                    log.info("%s", results[-1])
    return results


def report(results: list[dict], args) -> str:
    lines = [f"Record to subscriber, 1 shard, 1 gateway process, {args.batch} records every "
             f"{args.interval_ms:g} ms for {args.seconds:g} s, medians of {args.runs} runs",
             "", "| subscribers | transport | p50 ms | p99 ms | delivered rec/s (all) "
             "| complete |", "|---|---|---|---|---|---|"]
    for count in args.subscribers:
        for transport in TRANSPORTS:
            rows = [r for r in results
                    if r["subscribers"] == count and r["transport"] == transport]
            fig = {k: spread(r[k] for r in rows)["median"]
                   for k in ("p50_ms", "p99_ms", "delivered_per_s")}
            lines.append(f"| {count} | {transport} | {fig['p50_ms']:.1f} | "
                         f"{fig['p99_ms']:.1f} | {fig['delivered_per_s']:,.0f} | "
                         f"{all(r['complete'] for r in rows)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    return bench_main(parse_args(argv), run, report)


if __name__ == "__main__":
    sys.exit(main())
