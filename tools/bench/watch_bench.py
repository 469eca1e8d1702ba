"""Watch streams: SSE fan-out throughput, and record-to-watcher latency beside Redis.

    python tools/bench/watch_bench.py [--streams 1,16,64] [--seconds 4] [--batch 100]
                                      [--workers 1] [--runs 1]
    python tools/bench/watch_bench.py --mode latency [--watchers 1,10,100,1000] [--rate 20]
                                      [--seconds 5] [--runs 3] [--reader-procs 2] [--no-redis]

Fan-out (the default mode): a node with 1 shard and `--workers` gateway processes; one
topic; N sessions (tail) with one SSE stream each, read by asyncio in this process; one
ZeroMQ AsyncClient appends batches of `--batch` records of 100 bytes, one in flight, for
`--seconds`. Reported: records appended per second, records delivered per second over all
streams (N x appended when they keep up), and the latency from a record's `$ts` (its
commit, server clock) to its arrival, p50 and p99 over the last record of every frame.

Latency: the same light load on both sides of each run: one record per append at `--rate`
appends/s for `--seconds`, each record carrying its send time; N watchers spread over
`--reader-procs` processes (tools/bench/watch_readers.py). topics: 1 shard, one
`--durability` topic (fsync by default), the ZeroMQ AsyncClient appending, a watch session
and SSE stream per watcher. Redis: redis-server (appendonly yes, appendfsync always) in a
temp dir on a free port, XADD from the same kind of appender, one XREAD BLOCK connection per
watcher. Latency = arrival - send over every record at every watcher; medians over runs
and same-run ratios. Markdown on stdout; see docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import pathlib
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Importing http_bench puts this checkout first on sys.path and PYTHONPATH, so the node and
# its gateways run this checkout's code even where another one is installed.
import http_bench  # noqa: E402,F401
from bench_stats import latency_summary, spread  # noqa: E402  (sibling modules)
from node_proc import NodeProcess  # noqa: E402
import watch_latency  # noqa: E402
from watch_readers import http_json, read_watch_stream  # noqa: E402

from topics_actors.client import AsyncClient  # noqa: E402

log = logging.getLogger(__name__)
DATA = "x" * 98
TOPIC = "watch-bench"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="1,16,64")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--mode", choices=("fanout", "latency"), default="fanout")
    p.add_argument("--watchers", default="1,10,100,1000", help="latency mode: watcher counts")
    p.add_argument("--rate", type=float, default=20.0, help="latency mode: appends/s")
    p.add_argument("--reader-procs", type=int, default=2, help="latency mode")
    p.add_argument("--durability", default="fsync", help="latency mode: the topic's class")
    p.add_argument("--no-redis", action="store_true", help="latency mode: skip Redis")
    args = p.parse_args(argv)
    args.streams = [int(n) for n in args.streams.split(",") if n]
    args.watchers = [int(n) for n in args.watchers.split(",") if n]
    return args


class Watcher:
    """One SSE stream; counts records and samples commit-to-arrival latency."""

    def __init__(self):
        self.records = 0
        self.latencies_s: list[float] = []
        self.ready = asyncio.Event()

    async def run(self, port: int, url: str) -> None:
        await read_watch_stream(port, url, self._data, self.ready)

    def _data(self, raw: bytes) -> None:
        body = orjson.loads(raw)
        records = body.get("records")
        if records:
            self.records += len(records)
            self.latencies_s.append(time.time() - records[-1]["$ts"] / 1000)


async def one_case(port: int, endpoint: str, streams: int, seconds: float,
                   batch: int) -> dict:
    watchers, tasks = [], []
    for _ in range(streams):
        session = await http_json(port, "POST", "/v0/watch", {"topics": {TOPIC: {"tail": True}}})
        watcher = Watcher()
        watchers.append(watcher)
        tasks.append(asyncio.ensure_future(watcher.run(port, session["stream_url"])))
    await asyncio.wait_for(asyncio.gather(*(w.ready.wait() for w in watchers)), 30)
    appended = 0
    async with AsyncClient(endpoint) as client:
        records = [{"data": DATA}] * batch
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            await client.append(TOPIC, records)
            appended += batch
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 10
        while (sum(w.records for w in watchers) < appended * streams
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)
        drained_s = time.monotonic() - t0
    for task in tasks:
        task.cancel()
    delivered = sum(w.records for w in watchers)
    samples = [s for w in watchers for s in w.latencies_s]
    return {"streams": streams, "appended_per_s": appended / elapsed,
            "delivered_per_s": delivered / drained_s,
            "complete": delivered == appended * streams, **latency_summary(samples)}


def run(args) -> list[dict]:
    os.environ["TOPICS_GATEWAY_WORKERS"] = str(args.workers)
    results = []
    for streams in args.streams:
        for _ in range(args.runs):
            with NodeProcess(1) as node:
                port = json.load(open(os.path.join(node.tmp, "ports.json")))["http"]
                node.client.put_topic(TOPIC)
                results.append(asyncio.run(one_case(port, node.endpoint, streams,
                                                    args.seconds, args.batch)))
                log.info("%s", results[-1])
    return results


def report(results: list[dict], args) -> str:
    lines = [f"SSE fan-out, 1 shard, {args.workers} gateway process(es), batches of "
             f"{args.batch} records, {args.seconds:g} s per run, {args.runs} run(s)", "",
             "| streams | appended rec/s | delivered rec/s (all streams) | p50 ms | p99 ms "
             "| complete |", "|---|---|---|---|---|---|"]
    for streams in args.streams:
        rows = [r for r in results if r["streams"] == streams]
        fig = {k: spread(r[k] for r in rows)["median"]
               for k in ("appended_per_s", "delivered_per_s", "p50_ms", "p99_ms")}
        lines.append(f"| {streams} | {fig['appended_per_s']:,.0f} | "
                     f"{fig['delivered_per_s']:,.0f} | {fig['p50_ms']:.1f} | "
                     f"{fig['p99_ms']:.1f} | {all(r['complete'] for r in rows)} |")
    return "\n".join(lines)


def bench_main(args: argparse.Namespace, run_cases, report_cases) -> int:
    """Log to stderr, run, print the Markdown report, keep the raw results in `--json`
    (this bench's and ws_bench's entry point)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    results = run_cases(args)
    print(report_cases(results, args))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.mode == "latency":
        return bench_main(args, watch_latency.run, watch_latency.report)
    return bench_main(args, run, report)


if __name__ == "__main__":
    sys.exit(main())
