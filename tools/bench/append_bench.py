"""Append throughput and ack latency of topics-actors, side by side with its peers.

    python tools/bench/append_bench.py [--runs N] [--seconds S] [--shards K] [--install-redis]
        [--linger-ms 0,2,auto] [--shapes single,batch] [--classes fsync] [--no-redis]

One run = the fdatasync floor of the data dir, then every durability class in two shapes
(single-record appends from 50 producers; 64-record batches with a window of requests in
flight; the single shape once per `--linger-ms` value, the client's linger: 0 = off, a
number = a fixed linger, `auto` = the adaptive one, `autoN` = adaptive with N requests in
flight per topic), then
Redis streams (`appendfsync always` and `everysec`, XADD at -P 1 and -P 64) if
redis-server and redis-benchmark are installed. Runs repeat `--runs` times; the report gives
medians with min-max, as a markdown table, and the ratios that matter (see docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fsync_floor  # noqa: E402  (sibling modules of this script)
import redis_peer  # noqa: E402
import report  # noqa: E402
from bench_stats import latency_summary, percentile  # noqa: E402
from load_worker import DRAIN_GRACE_S, WorkerPool  # noqa: E402
from node_proc import NodeProcess  # noqa: E402

log = logging.getLogger(__name__)

CLASSES = ("ephemeral", "memory", "disk", "fsync")
SHAPES = ("single", "batch")
REDIS_MODES = ("always", "everysec")
REDIS_TIMEOUT_S = 120.0
WINDOW_COUNTERS = ("windows", "windows_full", "windows_quiet", "windows_limit")


class AutoLinger(float):
    """An adaptive linger case of --linger-ms (`auto`, or `autoN`: N requests in flight per
    topic). It is a float, negative, so the report's case list and labels take it as they
    take a fixed linger; it prints as its token."""

    def __new__(cls, token: str):
        in_flight = int(token[4:]) if token[4:] else 0
        made = super().__new__(cls, -(in_flight or 0.5))
        made.token, made.in_flight_max = token, in_flight or None
        return made

    def __format__(self, spec: str) -> str:
        return self.token

    def __repr__(self) -> str:
        return self.token


def linger_case(token: str) -> float:
    if token.startswith("auto") and (token[4:] == "" or token[4:].isdigit()):
        return AutoLinger(token)
    value = float(token)
    if not 0 <= value <= 1000:
        raise ValueError(token)
    return value


def add_load_arguments(p: argparse.ArgumentParser, seconds: float, warmup: float) -> None:
    """The options of the two load shapes and of the runs (also replication_bench's)."""
    p.add_argument("--runs", type=int, default=3, help="repetitions of every measurement")
    p.add_argument("--seconds", type=float, default=seconds, help="measured window per case")
    p.add_argument("--warmup", type=float, default=warmup, help="unmeasured lead-in per case")
    p.add_argument("--shards", type=int, default=1, help="WAL shards of every node")
    p.add_argument("--client-procs", type=int, default=2, help="client processes")
    p.add_argument("--producers", type=int, default=50, help="single-record producers")
    p.add_argument("--batch", type=int, default=64, help="records per append, batch shape")
    p.add_argument("--batch-window", type=int, default=25,
                   help="batched appends in flight per client process (25: 50 in flight "
                        "with 2 processes, as many as Redis's 50 clients)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(p, seconds=4.0, warmup=0.75)
    p.add_argument("--classes", default=",".join(CLASSES), help="durability classes")
    p.add_argument("--shapes", default=",".join(SHAPES), help="append shapes")
    p.add_argument("--linger-ms", default="0",
                   help="client linger_ms values of the single shape, e.g. 0,2,auto,auto2 "
                        "(0 = off, auto = adaptive, autoN = adaptive, N in flight per topic)")
    p.add_argument("--install-redis", action="store_true",
                   help="apt-get install redis-server if redis is missing")
    p.add_argument("--no-redis", action="store_true", help="skip the Redis peer")
    p.add_argument("--json", help="also write the raw per-run results here")
    args = p.parse_args(argv)
    args.classes = [c for c in args.classes.split(",") if c]
    args.shapes = [s for s in args.shapes.split(",") if s]
    try:
        args.linger_ms = [linger_case(v) for v in args.linger_ms.split(",") if v]
    except ValueError:
        p.error("bad --linger-ms")
    if (any(c not in CLASSES for c in args.classes) or args.runs < 1 or args.seconds <= 0
            or any(s not in SHAPES for s in args.shapes) or not args.linger_ms):
        p.error("bad --classes, --shapes, --linger-ms, --runs or --seconds")
    return args


def _sleep_until(when: float) -> None:
    """Wait for a point on the monotonic clock (the start or end of a measured window)."""
    time.sleep(max(0.0, when - time.monotonic()))


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def shape_jobs(args, shape: str, topics: list[str], start: float, end: float,
               linger_ms: float = 0) -> list[dict]:
    """Per-process jobs: 50 single-record producers, or a window of batched appends."""
    procs = args.client_procs
    total = args.producers if shape == "single" else args.batch_window * procs
    batch = 1 if shape == "single" else args.batch
    auto = isinstance(linger_ms, AutoLinger)
    linger = {"linger_ms": "auto" if auto else float(linger_ms),   # plain types: pickled
              "linger_in_flight_max": linger_ms.in_flight_max if auto else None}
    jobs, first = [], 0
    for count in _split(total, procs):
        jobs.append({"topics": topics, "batch": batch, "producers": count,
                     "first_producer": first, "start": start, "end": end,
                     "max_in_flight": max(256, count), **linger})
        first += count
    return jobs


def measure_append(node: NodeProcess, pool: WorkerPool, args, cls: str, shape: str,
                   run: int, linger_ms: float = 0) -> dict:
    topics = node.topic_names(f"bench-{cls}-{shape}-l{linger_ms:g}-r{run}")
    for topic in topics:
        node.client.put_topic(topic, durability=cls)
    start = time.monotonic() + args.warmup
    end = start + args.seconds
    pool.submit(shape_jobs(args, shape, topics, start, end, linger_ms))
    _sleep_until(start)
    before = node.snapshot()
    _sleep_until(end)
    after = node.snapshot()
    results = pool.collect(end + DRAIN_GRACE_S + 10)
    for topic in topics:
        node.client.delete_topic(topic)
    return summarise_append(results, before, after, args.seconds)


def summarise_append(results: list[dict], before: dict, after: dict, seconds: float) -> dict:
    fatal = [r["fatal"] for r in results if "fatal" in r]
    if fatal:
        log.error("client process failed: %s", fatal[0])
        return {"records_per_s": math.nan, "p50_ms": math.nan, "p99_ms": math.nan,
                "errors": len(fatal), "fatal": fatal[0]}
    latencies = [x for r in results for x in r["latencies"]]
    out = latency_summary(latencies)
    out["records_per_s"] = sum(r["records"] for r in results) / seconds
    out["requests_per_s"] = sum(r["requests"] for r in results) / seconds
    out["errors"] = sum(r["errors"] for r in results)
    out["stuck_producers"] = sum(r["stuck_producers"] for r in results)
    out["longest_ack_gap_s"] = max(r["max_gap_s"] for r in results)
    out["last_error"] = next((r["last_error"] for r in results if r["last_error"]), "")
    server_ms = sorted(x for r in results for x in r["server_ms"])
    out["server_p50_ms"] = percentile(server_ms, 50)
    fsync_ms = [x for r in results for x in r["fsync_ms"] if x > 0]
    out["fsync_mean_ms"] = sum(fsync_ms) / len(fsync_ms) if fsync_ms else math.nan
    out.update(cpu_split(results, before, after, seconds))
    delta = {k: after["stats"].get(k, 0) - before["stats"].get(k, 0) for k in after["stats"]}
    out["syncs"] = delta.get("syncs", 0)
    out["records_per_sync"] = (delta.get("records", 0) / out["syncs"]
                               if out["syncs"] else math.nan)
    out["requests_per_sync"] = (delta.get("requests", 0) / out["syncs"]
                                if out["syncs"] else math.nan)
    out["shard_restarts"] = after["incarnations"] - before["incarnations"]
    if out["shard_restarts"]:   # a restarted shard's counters start again from zero
        out["records_per_sync"] = out["requests_per_sync"] = math.nan
    out["throttled"] = delta.get("throttled", 0)
    out["failed_batches"] = delta.get("failed_batches", 0)
    out["windows"] = {k: delta.get(k, 0) for k in WINDOW_COUNTERS}
    return out


def cpu_split(results: list[dict], before: dict, after: dict, seconds: float) -> dict:
    """Cores used in the window by the shards, by the client processes, and by the rest of
    the machine (neighbours, this harness, the kernel's softirqs)."""
    wall = after["t"] - before["t"]
    if wall <= 0:
        return {"server_cpu": math.nan, "client_cpu": math.nan, "other_cpu": math.nan}
    server = (after["cpu_s"] - before["cpu_s"]) / wall
    client = sum(r["cpu_s"] for r in results) / seconds
    machine = (after["machine_busy_s"] - before["machine_busy_s"]) / wall
    return {"server_cpu": server, "client_cpu": client,
            "other_cpu": max(0.0, machine - server - client)}


def measure_redis(args, run: int) -> dict:
    p1 = max(5_000, int(25_000 * args.seconds))
    p64 = max(100_000, int(400_000 * args.seconds))
    out = {}
    for mode in REDIS_MODES:
        with redis_peer.RedisServer(mode) as server:
            for pipeline, requests in ((1, p1), (64, p64)):
                key = f"{mode}_P{pipeline}"
                try:
                    out[key] = server.benchmark(pipeline, requests, REDIS_TIMEOUT_S)
                except Exception as error:  # noqa: BLE001 - one failed case, reported
                    log.error("redis %s run %d failed: %r", key, run, error)
                    out[key] = {"ops_per_s": math.nan, "p50_ms": math.nan,
                                "p99_ms": math.nan, "error": repr(error)[:300]}
                log.info("run %d redis %s: %.0f ops/s p50 %.2f ms p99 %.2f ms", run, key,
                         out[key]["ops_per_s"], out[key]["p50_ms"], out[key]["p99_ms"])
    return out


def _log_case(run: int, key: str, res: dict) -> None:
    log.info("run %d %s: %.0f rec/s, ack p50 %.3f ms p99 %.3f ms (server p50 %.3f ms), "
             "rec/sync %.1f, cores: server %.2f client %.2f other %.2f, errors %d, "
             "group-commit windows %s", run, key,
             res["records_per_s"], res["p50_ms"], res["p99_ms"],
             res.get("server_p50_ms", math.nan), res.get("records_per_sync", math.nan),
             res.get("server_cpu", math.nan), res.get("client_cpu", math.nan),
             res.get("other_cpu", math.nan), res["errors"], res.get("windows", {}))


def run_once(run: int, args, node: NodeProcess, pool: WorkerPool, with_redis: bool) -> dict:
    result = {"floor": fsync_floor.fdatasync_floor(os.path.join(node.tmp, "data"))}
    floor = result["floor"]
    log.info("run %d fdatasync floor: p50 %.3f ms p99 %.3f ms %.0f ops/s", run,
             floor["p50_ms"], floor["p99_ms"], floor["ops_per_s"])
    for shape, linger_ms, suffix in report.cases(args):
        for cls in args.classes:
            key = f"{cls}/{shape}{suffix}"
            res = result[key] = measure_append(node, pool, args, cls, shape, run, linger_ms)
            _log_case(run, key, res)
    if with_redis:
        result["redis"] = measure_redis(args, run)
    return result


def linger_ratios(args, runs: list[dict]) -> str:
    """Each client linger case against the bars of issue 18: acks/s ÷ Redis `always` -P 1
    and ack p50 ÷ the fdatasync floor's p50, same runs."""
    if "fsync" not in args.classes or "single" not in args.shapes:
        return ""
    redis_p1 = [r["redis"].get("always_P1", {}).get("ops_per_s", math.nan)
                if "redis" in r else math.nan for r in runs]
    lines = []
    for _, linger_ms, suffix in report.cases(args):
        if not linger_ms:
            continue
        key = f"fsync/single{suffix}"
        lines.append(report.ratio_line(f"topics `fsync` single-record acks/s, client linger "
                                       f"{linger_ms:g} ÷ Redis `appendfsync always` -P 1",
                                       report.series(runs, key, "records_per_s"), redis_p1))
        lines.append(report.ratio_line(f"topics `fsync` single-record ack p50, client linger "
                                       f"{linger_ms:g} ÷ fdatasync floor p50",
                                       report.series(runs, key, "p50_ms"),
                                       report.series(runs, "floor", "p50_ms")))
    return "\n".join(lines)


def redis_ready(args) -> tuple[bool, str]:
    if args.no_redis:
        return False, "skipped (--no-redis)"
    if not redis_peer.available() and args.install_redis:
        problem = redis_peer.install()
        if problem:
            log.error("installing redis failed: %s", problem)
            return False, f"install failed: {problem}"
    if not redis_peer.available():
        return False, "redis-server/redis-benchmark not installed (try --install-redis)"
    return True, redis_peer.version()


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)   # unwinds the try/finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_signal)
    args = parse_args(argv)
    with_redis, redis_note = redis_ready(args)
    began = time.monotonic()
    runs = []
    with NodeProcess(args.shards) as node:
        pool = WorkerPool(node.endpoint, args.client_procs)
        try:
            for run in range(args.runs):
                runs.append(run_once(run, args, node, pool, with_redis))
        finally:
            pool.close()
            log.info("client processes stopped")
    meta = report.describe_setup(args, redis_note, time.monotonic() - began)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "runs": runs}, handle, indent=1, default=str)
    print(report.render(args, meta, runs))
    print(linger_ratios(args, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
