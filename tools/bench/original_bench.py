"""The original server's own probe, against the original and this project in the same run.

    python tools/bench/original_bench.py [--runs 3] [--workloads bench,queue,...]
        [--probe PATH] [--original PATH] [--env KEY=VALUE ...] [--json OUT]

`topics-probe` and `topics-original` are built by ../shared/peers/build.sh (default place:
~/.cache/topics-peers). For every run and workload, each server is started fresh (own temp
data dir, own process group, its embedded defaults), the probe runs its workload against
it with `--json`, and the server is stopped; the two servers alternate which goes first
from one workload to the next. Without the original built, only this project is measured.

Each figure is reported as the median over the runs for both servers and as the median of
the runs' own ratios, oriented so that > 1 means this project is ahead: throughput
ours / original, latency original / ours. The last line is the geometric mean of every
figure's ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Importing http_bench puts this checkout first on sys.path and PYTHONPATH, so the node runs
# this checkout's code even where another one is installed.
import http_bench  # noqa: E402,F401
from bench_stats import fmt_rate, paired_ratios, spread  # noqa: E402
from node_proc import NodeProcess, stop_group  # noqa: E402

log = logging.getLogger(__name__)
PEERS = os.path.expanduser("~/.cache/topics-peers")
ORIGINAL_PORT = 23300        # below the kernel's ephemeral range (peers/README.md)
START_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 900.0
FDS_WANTED = 65536           # 5000 SSE watchers need as many sockets on both ends

# The probe's invocations: name -> (probe subcommand, its arguments).
WORKLOADS = {
    "bench": ("bench", ["--writes", "40000", "--watchers", "1,100"]),
    "bench-durable": ("bench-durable", ["--samples", "2000", "--writes", "100000"]),
    "broadcast": ("broadcast", ["--watchers", "1000", "--pulses", "50"]),
    "broadcast-5000": ("broadcast", ["--watchers", "5000", "--pulses", "20"]),
    "media": ("media", ["--participants", "50", "--duration-s", "5", "--batches", "1"]),
    "queue": ("queue", ["--workers", "50", "--jobs", "20000"]),
    "actors": ("actors", ["--actors", "1000"]),
    "distribution": ("distribution", ["--topics", "2000"]),
}


@dataclasses.dataclass(frozen=True)
class Figure:
    label: str
    workload: str
    path: str             # dotted path into the probe's JSON
    higher_is_better: bool
    per_event: bool       # a per-event figure (issue 32's bars), else bulk

    def value(self, summary: dict) -> float:
        node = summary
        for part in self.path.split("."):
            if not isinstance(node, dict) or part not in node:
                return math.nan
            node = node[part]
        return float(node) if isinstance(node, (int, float)) else math.nan


FIGURES = [
    Figure("single-record ack p50 ms", "bench", "write.single_record_ack_latency.p50_ms",
           False, True),
    Figure("batch-100 writes rec/s", "bench", "write.throughput.records_per_s", True, False),
    Figure("caught-up tail read p50 ms", "bench", "diff.tail_caught_up_latency.p50_ms",
           False, True),
    Figure("diff reads, limit 1000, rec/s", "bench", "diff.limit_1000.records_per_s",
           True, False),
    Figure("router write -> visible p50 ms", "bench",
           "router.forwarded_write_to_visible.p50_ms", False, True),
    Figure("SSE write -> deliver p50 ms, 1 watcher", "bench",
           "sse_fanout.watchers_1.write_to_deliver_latency.p50_ms", False, True),
    Figure("SSE write -> deliver p50 ms, 100 watchers", "bench",
           "sse_fanout.watchers_100.write_to_deliver_latency.p50_ms", False, True),
    Figure("fsync single-record ack p50 ms", "bench-durable",
           "durable.single_record_ack_latency_ms.p50_ms", False, True),
    Figure("not-durable single-record ack p50 ms", "bench-durable",
           "non_durable.single_record_ack_latency_ms.p50_ms", False, True),
    Figure("fsync batch-100 rec/s", "bench-durable", "durable.throughput.records_per_s",
           True, False),
    Figure("SSE 1000 watchers: p50 ms", "broadcast",
           "tiers.watchers_1000.write_to_deliver_latency.p50_ms", False, True),
    Figure("SSE 1000 watchers: deliveries/s", "broadcast",
           "tiers.watchers_1000.deliveries_per_s", True, True),
    Figure("SSE 5000 watchers: deliveries measured", "broadcast-5000",
           "tiers.watchers_5000.deliveries_measured", True, True),
    Figure("SSE 5000 watchers: p50 ms", "broadcast-5000",
           "tiers.watchers_5000.write_to_deliver_latency.p50_ms", False, True),
    Figure("voice room p50 ms", "media",
           "tiers.packets_per_record_1.packet_latency.p50_ms", False, True),
    Figure("voice room p99 ms", "media",
           "tiers.packets_per_record_1.packet_latency.p99_ms", False, True),
    Figure("queue jobs/s", "queue", "jobs_per_s", True, True),
    Figure("queue claim p50 ms", "queue", "claim_latency.p50_ms", False, True),
    Figure("actor events/s", "actors", "events_per_s", True, True),
    Figure("fan-in to 2000 topics rec/s", "distribution", "appends_per_s", True, False),
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    p.add_argument("--probe", default=os.path.join(PEERS, "topics-probe"))
    p.add_argument("--original", default=os.path.join(PEERS, "topics-original"))
    p.add_argument("--env", action="append", default=[],
                   help="KEY=VALUE for this project's node (repeatable)")
    p.add_argument("--json", help="also write every probe summary here")
    args = p.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s): {', '.join(unknown)}")
    if not os.access(args.probe, os.X_OK):
        p.error(f"no probe at {args.probe}: build it with ../shared/peers/build.sh")
    args.env = dict(pair.split("=", 1) for pair in args.env)
    return args


# --- the two servers --------------------------------------------------------------------------

def _wait_healthy(url: str, alive) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"the server behind {url} exited while starting")
        try:
            with urllib.request.urlopen(url + "/v0/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready in {START_TIMEOUT_S:.0f} s")


class OriginalServer:
    """The original, configured by its environment only, on a fresh data dir."""

    def __init__(self, binary: str):
        self.binary = binary
        self.tmp = tempfile.TemporaryDirectory(prefix="topics-original-")
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{ORIGINAL_PORT}"

    def __enter__(self) -> "OriginalServer":
        env = dict(os.environ, TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(ORIGINAL_PORT),
                   TOPICS_DATA_DIR=self.tmp.name)
        self.proc = subprocess.Popen([self.binary], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            _wait_healthy(self.url, lambda: self.proc.poll() is None)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None
        self.tmp.cleanup()


class OurServer:
    """This project's node with its embedded defaults (shards: min(cpus, 8))."""

    def __init__(self, env: dict):
        self.node = NodeProcess(os.cpu_count() and min(os.cpu_count(), 8) or 1, env=env)
        self.url = ""

    def __enter__(self) -> "OurServer":
        self.node.start()
        self.url = f"http://127.0.0.1:{self.node.ports['http']}"
        _wait_healthy(self.url, lambda: self.node.proc.poll() is None)
        return self

    def __exit__(self, *exc) -> None:
        self.node.stop()


def run_probe(probe: str, workload: str, url: str) -> dict:
    command, extra = WORKLOADS[workload]
    began = time.monotonic()
    done = subprocess.run([probe, command, url, *extra, "--json"], capture_output=True,
                          timeout=PROBE_TIMEOUT_S, start_new_session=True)
    if done.returncode != 0:
        log.warning("probe %s exited %d: %s", workload, done.returncode,
                    done.stderr.decode(errors="replace")[-400:])
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        summary = {}
    log.info("%s against %s: %.1f s", workload, url, time.monotonic() - began)
    return summary


def measure(args) -> list[dict]:
    """One entry per (run, workload): both servers' probe summaries."""
    sides = {"ours": lambda: OurServer(args.env)}
    if os.access(args.original, os.X_OK):
        sides["original"] = lambda: OriginalServer(args.original)
    else:
        log.warning("no original at %s: measuring this project alone", args.original)
    results, turn = [], 0
    for run in range(args.runs):
        for workload in args.workloads:
            order = sorted(sides, reverse=bool(turn % 2))
            turn += 1
            entry = {"run": run, "workload": workload}
            for side in order:
                with sides[side]() as server:
                    entry[side] = run_probe(args.probe, workload, server.url)
            results.append(entry)
    return results


# --- the report -------------------------------------------------------------------------------

def _fmt(value: float, higher_is_better: bool) -> str:
    if math.isnan(value):
        return "n/a"
    return fmt_rate(value) if higher_is_better else f"{value:.3f}"


def figure_rows(results: list[dict]) -> list[dict]:
    rows = []
    for figure in FIGURES:
        entries = [e for e in results if e["workload"] == figure.workload]
        if not entries:
            continue
        ours = [figure.value(e.get("ours", {})) for e in entries]
        original = [figure.value(e.get("original", {})) for e in entries]
        ratios = (paired_ratios(ours, original) if figure.higher_is_better
                  else paired_ratios(original, ours))
        rows.append({"figure": figure, "ours": spread(ours)["median"],
                     "original": spread(original)["median"], "ratios": ratios,
                     "ratio": spread(ratios)["median"]})
    return rows


def geometric_mean(values: list[float]) -> float:
    clean = [v for v in values if v > 0 and not math.isnan(v)]
    return math.exp(sum(map(math.log, clean)) / len(clean)) if clean else math.nan


def report(results: list[dict], runs: int) -> str:
    rows = figure_rows(results)
    lines = ["| figure (probe workload) | original | this project | ratio (> 1: ahead) "
             "| runs' ratios |", "|---|---:|---:|---:|---|"]
    for row in rows:
        figure = row["figure"]
        lines.append(f"| {figure.label} ({figure.workload}) | "
                     f"{_fmt(row['original'], figure.higher_is_better)} | "
                     f"{_fmt(row['ours'], figure.higher_is_better)} | {row['ratio']:.2f} | "
                     + ", ".join(f"{r:.2f}" for r in row["ratios"]) + " |")
    per_event = [r["ratio"] for r in rows if r["figure"].per_event]
    bulk = [r["ratio"] for r in rows if not r["figure"].per_event]
    lines += ["", f"medians of {runs} run(s); throughput ratio = ours / original, latency "
              "ratio = original / ours.",
              f"geometric mean: all {geometric_mean([r['ratio'] for r in rows]):.2f}, "
              f"per-event {geometric_mean(per_event):.2f}, bulk {geometric_mean(bulk):.2f}"]
    return "\n".join(lines)


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(FDS_WANTED, hard) if hard != resource.RLIM_INFINITY else FDS_WANTED
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    raise_fd_limit()                  # inherited by both servers and the probe
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))    # servers stopped on the way out
    results = measure(args)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    print(report(results, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
