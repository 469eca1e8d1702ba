"""This project beside the original server, over HTTP, with the original's own probe.

    flock /work/rooms/.bench.lock python3 tools/bench/peer_bench.py [--runs 3]

Starts the original (`~/.cache/topics-peers/topics-original`, or --original) and a
`topics serve` node of this checkout, each on a fresh temp data dir, and runs the same
`topics-probe` workloads against both, alternating which server goes first from run to
run. Prints a markdown table of medians (min-max) and the ratios, > 1 meaning this project
is ahead: throughput as ours/original, latency as original/ours. Both servers run with
their defaults (this project's node with one gateway and min(cpus, 8) shards).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from node_proc import NodeProcess  # noqa: E402

log = logging.getLogger("peer_bench")
PEERS = os.path.expanduser("~/.cache/topics-peers")
START_DEADLINE_S = 30.0
PROBE_TIMEOUT_S = 300

# (label, probe workload argv, path into its JSON, "rate" or "latency", unit)
FIGURES = (
    ("fsync, 100-record batches, 16 writers", ("bench-durable", "--samples", "2000",
     "--writes", "500000"), ("durable", "throughput", "records_per_s"), "rate", "records/s"),
    ("fsync, single-record ack p50", None, ("durable", "single_record_ack_latency_ms",
     "p50_ms"), "latency", "ms"),
    ("ephemeral, single-record ack p50", None, ("non_durable",
     "single_record_ack_latency_ms", "p50_ms"), "latency", "ms"),
    ("SSE, 100 watchers, write to deliver p50", ("bench", "--writes", "20000", "--watchers",
     "100"), ("sse_fanout", "watchers_100", "write_to_deliver_latency", "p50_ms"),
     "latency", "ms"),
    ("queue, 50 workers, claim + ack", ("queue", "--workers", "50", "--jobs", "20000"),
     ("jobs_per_s",), "rate", "jobs/s"),
)


class OriginalServer:
    """The original Rust server on a free port below 32768 and a temp data dir."""

    def __init__(self, binary: str):
        self.binary = binary
        self.tmp = ""
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "OriginalServer":
        self.tmp = tempfile.mkdtemp(prefix="topics-original-")
        port = free_low_port()
        env = dict(os.environ, TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(port),
                   TOPICS_DATA_DIR=os.path.join(self.tmp, "data"))
        self.log_handle = open(os.path.join(self.tmp, "server.log"), "wb")
        self.proc = subprocess.Popen([self.binary], env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.log_handle, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        wait_ready(self.url, self.proc)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log_handle.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def free_low_port() -> int:
    """A free port below the kernel's ephemeral range (peers/README.md says why)."""
    for port in range(21300 + os.getpid() % 500 * 20, 32000):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below 32000")


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v0/ready", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{url} not ready after {START_DEADLINE_S:.0f} s")


def probe(probe_bin: str, url: str, argv: tuple) -> dict:
    done = subprocess.run([probe_bin, argv[0], url, *argv[1:], "--json"], capture_output=True,
                          text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"probe {argv[0]} {url} exited {done.returncode}: "
                           f"{done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def figure(doc: dict, path: tuple) -> float:
    for key in path:
        doc = doc[key]
    return float(doc)


def measure(args, server_url: str) -> dict[str, float]:
    """Every figure once against one server (one probe run per workload)."""
    out, doc = {}, {}
    for label, argv, path, _, _ in FIGURES:
        if argv is not None:
            doc = probe(args.probe, server_url, argv)
        out[label] = figure(doc, path)
    return out


def our_url(node: NodeProcess) -> str:
    with open(os.path.join(node.tmp, "ports.json"), "rb") as handle:
        return f"http://127.0.0.1:{json.load(handle)['http']}"


def run_all(args) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"ours": [], "original": []}
    with OriginalServer(args.original) as original, NodeProcess(args.shards) as node:
        urls = {"original": original.url, "ours": our_url(node)}
        for run in range(args.runs):
            order = ("ours", "original") if run % 2 == 0 else ("original", "ours")
            for name in order:
                log.info("run %d/%d: %s", run + 1, args.runs, name)
                results[name].append(measure(args, urls[name]))
    return results


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value / 1000:.1f} K" if value >= 10_000 else f"{value:.0f}"


def report(results: dict[str, list[dict]], args) -> str:
    rows = ["| figure | this project | the original | ratio (same-run ratios) |",
            "|---|---:|---:|---:|"]
    for label, _, _, kind, unit in FIGURES:
        ours = [r[label] for r in results["ours"]]
        theirs = [r[label] for r in results["original"]]
        pairs = [(a / b if kind == "rate" else b / a) for a, b in zip(ours, theirs) if a and b]
        mo, mt = statistics.median(ours), statistics.median(theirs)
        if not (mo and mt):   # a workload that failed on one side reports 0
            rows.append(f"| {label} | {fmt(mo, unit)} | {fmt(mt, unit)} | n/a |")
            continue
        whole = mo / mt if kind == "rate" else mt / mo
        rows.append(f"| {label} | {fmt(mo, unit)} | {fmt(mt, unit)} | **{whole:.2f}x** "
                    f"({min(pairs):.2f}-{max(pairs):.2f}) |")
    head = (f"peer_bench: {args.runs} runs, medians; ratio > 1 means this project is ahead "
            f"(throughput ours/original, latency original/ours); load average "
            f"{os.getloadavg()[0]:.2f} at the end.\n\n")
    return head + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shards", type=int, default=min(os.cpu_count() or 1, 8))
    parser.add_argument("--original", default=os.path.join(PEERS, "topics-original"))
    parser.add_argument("--probe", default=os.path.join(PEERS, "topics-probe"))
    parser.add_argument("--json", help="write the raw per-run figures here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    for path in (args.original, args.probe):
        if not os.access(path, os.X_OK):
            print(f"peer_bench: {path}: not built (see /work/shared/peers/README.md)",
                  file=sys.stderr)
            return 2
    results = run_all(args)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
