"""Replicated appends beside single-copy ones, in one run (issue 17 item 5).

    python tools/bench/replication_bench.py [--runs N] [--seconds S] [--producers P] [--no-redis]

The bench starts, all on loopback: a plain node (no ZooKeeper) for the RF 1 `fsync` topic;
one ZooKeeper and three clustered nodes for the RF 3 `fsync` topics; and, if redis-server is
installed, one Redis master with two replicas (all three `appendfsync always`). Every run
measures, in two shapes (single-record appends from --producers producers; --batch-record
appends with a window in flight), one case after the other on a fresh topic or stream:

- `rf1`: RF 1 `fsync` topic on the plain node (the append_bench `fsync` case);
- `rf3_all`: RF 3 `fsync` topic, min_isr 2, `acks: all` (ack once every ISR member fsynced);
- `rf3_leader`: the same topic shape with `acks: leader` (ack after the leader's fsync);
- `redis`: XADD (one, or --batch pipelined) then `WAIT 2 <ms>` per request, same producers.

An RF 3 case starts only once its topic's ISR has three members. The report gives medians
of --runs with min-max as a markdown table, and the ratio of RF 3 `acks: all` records/s to
RF 1 records/s (the issue's goal: at least 0.5). Everything the bench started is stopped,
and its temp dir removed, at exit, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO_ROOT, HERE]     # this checkout's engine first, then the sibling modules

import redis_peer  # noqa: E402
import report  # noqa: E402
from append_bench import (  # noqa: E402
    SHAPES, add_load_arguments, shape_jobs, summarise_append,
)
from bench_stats import fmt_spread, ratio, spread  # noqa: E402
from load_worker import DRAIN_GRACE_S, WorkerPool  # noqa: E402
from node_proc import NodeProcess, group_cpu_s, machine_busy_s  # noqa: E402
from resp_client import call_once  # noqa: E402
from tools.testing.zookeeper_server import ZooKeeperServer, zookeeper_installed  # noqa: E402

log = logging.getLogger(__name__)

CASES = ("rf1", "rf3_all", "rf3_leader", "redis")
LABELS = {"rf1": "RF 1 `fsync`, single node",
          "rf3_all": "RF 3 `fsync`, `acks: all`",
          "rf3_leader": "RF 3 `fsync`, `acks: leader`",
          "redis": "Redis 1 master + 2 replicas, XADD + `WAIT 2`"}
NODE_IDS = ("a", "b", "c")
ZK_SESSION_MS = 6_000          # the production default of docs/CLUSTER.md, not the tests' 1 s
ISR_DEADLINE_S = 30.0
REDIS_WAIT_MS = 1_000
REDIS_SYNC_DEADLINE_S = 20.0
GOAL_RATIO = 0.5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(p, seconds=3.0, warmup=1.0)
    p.add_argument("--no-redis", action="store_true", help="skip the Redis peer")
    p.add_argument("--json", help="also write the raw per-run results here")
    args = p.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0 or args.producers < 1 or args.client_procs < 1:
        p.error("--runs, --seconds, --producers and --client-procs must be positive")
    return args


def _sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.monotonic()))


# --- what the bench starts ------------------------------------------------------------------

def _temp_dir(stack: contextlib.ExitStack, prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    return path


def _side_by_side(calls: list) -> None:
    """Run the calls in threads at once; the first exception is raised once all ended."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    for future in futures:
        future.result()


def start_nodes(stack: contextlib.ExitStack, nodes: list[NodeProcess]) -> None:
    """Start nodes side by side; their stop (also side by side: each takes a grace period)
    is registered before they start."""
    stack.callback(_side_by_side, [node.stop for node in nodes])
    _side_by_side([node.start for node in nodes])


def start_cluster(stack: contextlib.ExitStack, args) -> tuple[ZooKeeperServer, list]:
    """One ZooKeeper and three nodes that join it."""
    zookeeper = ZooKeeperServer(_temp_dir(stack, "topics-bench-zk-"))
    stack.callback(zookeeper.stop)
    zookeeper.start()
    nodes = [NodeProcess(args.shards, env={
        "TOPICS_ZK": zookeeper.connect, "TOPICS_NODE_ID": node_id,
        "TOPICS_ZK_SESSION_TIMEOUT_MS": str(ZK_SESSION_MS), "TOPICS_GATEWAY_WORKERS": "1"})
        for node_id in NODE_IDS]
    start_nodes(stack, nodes)
    log.info("cluster ready: zookeeper %s, nodes %s", zookeeper.connect,
             ", ".join(n.endpoint for n in nodes))
    return zookeeper, nodes


def _replicas_online(port: int) -> int:
    info = asyncio.run(call_once(port, "INFO", "replication")).decode()
    return sum(1 for line in info.splitlines()
               if line.startswith("slave") and "state=online" in line)


def start_redis(stack: contextlib.ExitStack) -> list[redis_peer.RedisServer]:
    """A master and two replicas, all `appendfsync always`; returns once both replicas are
    online. The master is first in the list."""
    master = stack.enter_context(redis_peer.RedisServer("always"))
    replicas = [stack.enter_context(redis_peer.RedisServer(
        "always", extra_args=["--replicaof", "127.0.0.1", str(master.port)]))
        for _ in range(2)]
    deadline = time.monotonic() + REDIS_SYNC_DEADLINE_S
    while _replicas_online(master.port) < len(replicas):
        if time.monotonic() > deadline:
            raise TimeoutError("Redis replicas not online in time")
        time.sleep(0.1)
    log.info("redis ready: master port %d, replicas %s", master.port,
             ", ".join(str(r.port) for r in replicas))
    return [master, *replicas]


class Setup:
    """What the bench runs against, and the process groups whose CPU counts as server."""

    def __init__(self, plain: NodeProcess, zookeeper: ZooKeeperServer | None,
                 cluster: list[NodeProcess], redis: list[redis_peer.RedisServer]):
        self.plain, self.zookeeper, self.cluster, self.redis = plain, zookeeper, cluster, redis

    def cases(self) -> list[str]:
        return [c for c in CASES if (c != "redis" or self.redis)
                and (not c.startswith("rf3") or self.cluster)]

    def server_pids(self, case: str) -> list[int]:
        if case == "rf1":
            return [self.plain.proc.pid]
        if case == "redis":
            return [server.proc.pid for server in self.redis]
        return [self.zookeeper.proc.pid, *(node.proc.pid for node in self.cluster)]

    def snapshot(self, case: str, stats_node: NodeProcess | None) -> dict:
        """append_bench's snapshot: the shard statistics of `stats_node` (the topic's
        leader), and the CPU of every process of the case's servers (all nodes of the
        cluster and ZooKeeper for RF 3, the three servers for Redis)."""
        snap = (stats_node.snapshot() if stats_node is not None
                else {"stats": {}, "incarnations": 0})
        snap["cpu_s"] = sum(group_cpu_s(pid) for pid in self.server_pids(case))
        snap["machine_busy_s"] = machine_busy_s()
        snap["t"] = time.monotonic()
        return snap


# --- one case ---------------------------------------------------------------------------------

def wait_isr(node: NodeProcess, topic: str, members: int) -> dict:
    """The topic's replication state once its ISR has `members` members."""
    deadline = time.monotonic() + ISR_DEADLINE_S
    while True:
        replication = node.client.get_topic(topic).get("replication") or {}
        if len(replication.get("isr") or ()) >= members and replication.get("leader"):
            return replication
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: ISR {replication.get('isr')} after "
                               f"{ISR_DEADLINE_S:.0f} s")
        time.sleep(0.05)


def prepare(setup: Setup, case: str, topic: str) -> tuple[dict, NodeProcess | None]:
    """Create the case's topic; the job fields that aim the load at it, and the node whose
    shard statistics describe it."""
    if case == "rf1":
        setup.plain.client.put_topic(topic, durability="fsync")
        return {"endpoint": setup.plain.endpoint}, setup.plain
    if case == "redis":
        return {"redis_port": setup.redis[0].port, "redis_wait_replicas": 2,
                "redis_wait_ms": REDIS_WAIT_MS}, None
    first = setup.cluster[0]
    first.client.put_topic(topic, replication_factor=3, durability="fsync")
    replication = wait_isr(first, topic, len(setup.cluster))
    leader = setup.cluster[NODE_IDS.index(replication["leader"])]
    acks = case.split("_", 1)[1]
    # Aimed at the leader's front: the node a client would be sent to by not_leader.
    return {"endpoint": leader.endpoint, "append_options": {"acks": acks}}, leader


def discard(setup: Setup, case: str, topic: str) -> None:
    """Delete the case's topic (or stream), so it costs nothing during the next cases.
    Replicated topics cannot be deleted yet (docs/CLUSTER.md): they stay, idle, until the
    cluster is stopped; an idle one costs its followers a parked fetch every 500 ms."""
    try:
        if case == "rf1":
            setup.plain.client.delete_topic(topic)
        elif case == "redis":
            asyncio.run(call_once(setup.redis[0].port, "DEL", topic))
    except Exception as error:  # noqa: BLE001 - a leftover topic only costs idle work
        log.warning("could not delete %s (%s): %r", topic, case, error)


def measure(setup: Setup, pool: WorkerPool, args, case: str, shape: str, run: int) -> dict:
    topic = f"repl-{case.replace('_', '-')}-{shape}-r{run}"
    try:
        try:
            target, stats_node = prepare(setup, case, topic)
        except Exception as error:  # noqa: BLE001 - this case fails, the others still run
            log.error("run %d %s/%s: set-up failed: %r", run, case, shape, error)
            return {"records_per_s": math.nan, "p50_ms": math.nan, "p99_ms": math.nan,
                    "errors": 1, "fatal": f"set-up: {error!r}"[:300]}
        start = time.monotonic() + args.warmup
        end = start + args.seconds
        jobs = shape_jobs(args, shape, [topic], start, end)
        pool.submit([{**job, **target} for job in jobs])
        _sleep_until(start)
        before = setup.snapshot(case, stats_node)
        _sleep_until(end)
        after = setup.snapshot(case, stats_node)
        results = pool.collect(end + DRAIN_GRACE_S + 10)
    finally:
        discard(setup, case, topic)
    return summarise_append(results, before, after, args.seconds)


def run_once(run: int, args, setup: Setup, pool: WorkerPool) -> dict:
    """Every case in both shapes; the cases' order rotates from run to run, so no case
    always comes first after a shape change."""
    cases = setup.cases()
    order = cases[run % len(cases):] + cases[:run % len(cases)]
    result = {}
    for shape in SHAPES:
        for case in order:
            key = f"{case}/{shape}"
            res = result[key] = measure(setup, pool, args, case, shape, run)
            log.info("run %d %s: %.0f rec/s, ack p50 %.3f ms p99 %.3f ms, rec/sync %.1f, "
                     "cores: server %.2f client %.2f other %.2f, errors %d", run, key,
                     res["records_per_s"], res["p50_ms"], res["p99_ms"],
                     res.get("records_per_sync", math.nan), res.get("server_cpu", math.nan),
                     res.get("client_cpu", math.nan), res.get("other_cpu", math.nan),
                     res["errors"])
    return result


# --- the report -------------------------------------------------------------------------------

def shape_label(args, shape: str) -> str:
    if shape == "single":
        return f"1 rec/append, {args.producers} producers"
    return f"{args.batch} rec/append, {args.batch_window * args.client_procs} in flight"


def table(args, runs: list[dict], cases: list[str]) -> str:
    lines = ["| case | shape | records/s, median (min–max) | ack p50 | ack p99 | "
             "records per fsync (leader) | cores: servers / clients / other | errors |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for shape in SHAPES:
        for case in cases:
            key = f"{case}/{shape}"
            per_sync = fmt_spread(spread(report.series(runs, key, "records_per_sync")),
                                  report.fmt_n)
            errors = sum(int(r[key]["errors"]) for r in runs if key in r)
            cells = report.row(f"{LABELS[case]} | {shape_label(args, shape)}",
                               report.series(runs, key, "records_per_s"),
                               report.series(runs, key, "p50_ms"),
                               report.series(runs, key, "p99_ms"),
                               ["" if case == "redis" else per_sync,
                                report.cores(runs, key), str(errors)])
            lines.append(cells)
    return "\n".join(lines)


def ratios(args, runs: list[dict], cases: list[str]) -> str:
    lines = []
    for shape in SHAPES:
        label = shape_label(args, shape)
        base = report.series(runs, f"rf1/{shape}", "records_per_s")
        if "rf3_all" not in cases:
            continue
        rf3_all = report.series(runs, f"rf3_all/{shape}", "records_per_s")
        median = ratio(spread(rf3_all)["median"], spread(base)["median"])
        verdict = ("n/a" if math.isnan(median)
                   else "met" if median >= GOAL_RATIO else "not met")
        lines.append(report.ratio_line(f"{label}: RF 3 `acks: all` ÷ RF 1 records/s "
                                       f"(goal ≥ {GOAL_RATIO}: {verdict})", rf3_all, base))
        lines.append(report.ratio_line(f"{label}: RF 3 `acks: leader` ÷ RF 1 records/s",
                                       report.series(runs, f"rf3_leader/{shape}",
                                                     "records_per_s"), base))
        lines.append(report.ratio_line(f"{label}: RF 3 `acks: all` ÷ RF 1 ack p50",
                                       report.series(runs, f"rf3_all/{shape}", "p50_ms"),
                                       report.series(runs, f"rf1/{shape}", "p50_ms")))
        if "redis" in cases:
            lines.append(report.ratio_line(f"{label}: RF 3 `acks: all` ÷ Redis XADD + WAIT 2 "
                                           "records/s", rf3_all,
                                           report.series(runs, f"redis/{shape}",
                                                         "records_per_s")))
    return "\n".join(lines)


def render(args, meta: dict, runs: list[dict], cases: list[str]) -> str:
    setup = (f"engine commit {meta['engine_commit']}; shards per node={meta['shards']}, "
             f"client processes={meta['client_procs']}, runs={meta['runs']}, "
             f"window={meta['seconds']} s (+{meta['warmup']} s warm-up), payload 100 B JSON, "
             f"Python {meta['python']}, {meta['cpus']} CPUs; load average "
             f"{meta['loadavg_before']} before, {meta['loadavg_after']} after; "
             f"Redis: {meta['redis']}; elapsed {meta['elapsed_s']} s")
    parts = ["## Replication benchmark", "", f"`{meta['argv']}`", "", setup, "",
             table(args, runs, cases), "", "### Ratios", "", ratios(args, runs, cases)]
    problems = report.anomalies(runs)
    if problems:
        parts += ["", "### Anomalies", "", *problems[:30]]
    return "\n".join(parts) + "\n"


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- main -------------------------------------------------------------------------------------

def redis_note(args) -> tuple[bool, str]:
    if args.no_redis:
        return False, "skipped (--no-redis)"
    if not shutil.which("redis-server"):
        return False, "redis-server not installed"
    return True, f"{redis_peer.version()}, WAIT 2 {REDIS_WAIT_MS} after every request"


def start_all(stack: contextlib.ExitStack, args, with_redis: bool) -> Setup:
    if not zookeeper_installed():
        raise SystemExit("ZooKeeper is not installed (/usr/share/java/zookeeper.jar): "
                         "the RF 3 cases need it")
    plain = NodeProcess(args.shards)
    start_nodes(stack, [plain])
    zookeeper, cluster = start_cluster(stack, args)
    redis = start_redis(stack) if with_redis else []
    return Setup(plain, zookeeper, cluster, redis)


def warm_pool(pool: WorkerPool) -> None:
    """One empty job per client process, so the imports and the first connection of a
    freshly spawned process fall outside the first case's window."""
    now = time.monotonic()
    pool.submit([{"topics": ["warm-up"], "batch": 1, "producers": 0, "first_producer": 0,
                  "start": now, "end": now, "max_in_flight": 1}] * len(pool))
    pool.collect(now + DRAIN_GRACE_S + 30)


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)   # unwinds the ExitStack that stops every server


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_signal)
    args = parse_args(argv)
    with_redis, note = redis_note(args)
    began, load_before = time.monotonic(), _loadavg()
    runs: list[dict] = []
    with contextlib.ExitStack() as stack:
        setup = start_all(stack, args, with_redis)
        pool = WorkerPool(setup.plain.endpoint, args.client_procs)
        stack.callback(pool.close)
        warm_pool(pool)
        for run in range(args.runs):
            runs.append(run_once(run, args, setup, pool))
        cases = setup.cases()
    meta = report.describe_setup(args, note, time.monotonic() - began)
    meta.update(loadavg_before=load_before, loadavg_after=_loadavg())
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "runs": runs}, handle, indent=1, default=str)
    print(render(args, meta, runs, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
