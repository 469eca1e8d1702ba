"""HTTP throughput of the gateway, beside the ZeroMQ client on the same node shape.

    python tools/bench/http_bench.py [--runs N] [--seconds S] [--workers 1,2] [--no-zmq]
        [--classes fsync] [--shapes single,batch] [--batch 64] [--no-diff]

wrk (Debian package, installed with apt-get if missing) drives the /v0 API with a Lua
script that POSTs a fixed JSON body: single-record appends (50 connections) and
`--batch`-record appends (32 connections, as many as the ZeroMQ client keeps in flight) per
durability class, and diff reads of 1000 records per request (16 connections), against a
node with 1 shard and 1, then 2 gateway processes. After each run's HTTP cases,
tools/bench/append_bench.py measures the ZeroMQ client on the same shapes (50 producers;
`--batch` records, 2 processes x 16 in flight) on its own node, so the two alternate.
Medians with min-max over the runs, the gateway's CPU per request, and the ratios HTTP over
ZeroMQ (of the medians, and the median of each run's own ratio), as markdown on stdout;
see docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The node, the gateways and append_bench.py run this checkout's code, even where another
# checkout is the installed one (PYTHONPATH comes before site-packages).
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(1, _ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)

from bench_stats import spread  # noqa: E402  (sibling modules of this script)
from node_proc import NodeProcess  # noqa: E402

log = logging.getLogger(__name__)

CLASSES = ("ephemeral", "memory", "disk", "fsync")
DATA = "x" * 98                 # 100 bytes of compact JSON per record, as append_bench
SHAPES = {"single": (1, 50), "batch": (64, 32)}      # records per request, connections
DIFF_LIMIT, DIFF_CONNECTIONS = 1000, 16
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seconds", type=int, default=4, help="wrk duration per case")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured wrk lead-in per case")
    p.add_argument("--workers", default="1,2", help="gateway process counts to measure")
    p.add_argument("--classes", default=",".join(CLASSES))
    p.add_argument("--shapes", default=",".join(SHAPES), help="append shapes")
    p.add_argument("--batch", type=int, default=SHAPES["batch"][0],
                   help="records per request, batch shape")
    p.add_argument("--no-diff", action="store_true", help="skip the diff reads")
    p.add_argument("--no-zmq", action="store_true", help="skip the ZeroMQ client figures")
    p.add_argument("--json", help="also write the raw results here")
    args = p.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(",") if w]
    args.classes = [c for c in args.classes.split(",") if c]
    args.shapes = {s: SHAPES[s] for s in args.shapes.split(",") if s}
    if "batch" in args.shapes:
        args.shapes["batch"] = (args.batch, SHAPES["batch"][1])
    return args


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    log.info("wrk is missing: apt-get install -y wrk")
    subprocess.run(["apt-get", "install", "-y", "wrk"], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "update"], check=False, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True,
                       stdout=subprocess.DEVNULL)
    return shutil.which("wrk")


def lua_post(path: str, body: bytes) -> str:
    with open(path, "w") as handle:
        handle.write('wrk.method = "POST"\n'
                     'wrk.headers["Content-Type"] = "application/json"\n'
                     f"wrk.body = [==[{body.decode()}]==]\n")
    return path


def parse_wrk(text: str) -> dict:
    def latency(label: str) -> float:
        found = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(found.group(1)) * _UNITS[found.group(2)] if found else float("nan")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:.*", text)
    return {"requests_per_s": float(rate.group(1)) if rate else float("nan"),
            "p50_ms": latency("50"), "p99_ms": latency("99"),
            "non_2xx": int(bad.group(1)) if bad else 0,
            "socket_errors": errors.group(0) if errors else ""}


def wrk(binary: str, url: str, script: str, connections: int, seconds: int) -> dict:
    out = subprocess.run([binary, "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", script, url], capture_output=True, text=True, check=True)
    return parse_wrk(out.stdout)


def http(port: int, method: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def batch_body(records: int) -> bytes:
    return json.dumps({"records": [{"data": DATA}] * records}, separators=(",", ":")).encode()


def gateway_cpu_s(node: NodeProcess) -> float:
    """CPU seconds used so far by the node's gateway processes."""
    total = 0.0
    for child in psutil.Process(node.proc.pid).children(recursive=True):
        try:
            if "topics_actors.gateway" in child.cmdline():
                times = child.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            pass
    return total


def measure(args, binary: str, node: NodeProcess, port: int, tmp: str, topic: str,
            body: bytes, connections: int) -> dict:
    url = f"http://127.0.0.1:{port}/v0/topics/{topic}"
    script = lua_post(os.path.join(tmp, "post.lua"), body)
    if args.warmup:
        wrk(binary, url, script, connections, args.warmup)
    cpu_before = gateway_cpu_s(node)
    res = wrk(binary, url, script, connections, args.seconds)
    requests = res["requests_per_s"] * args.seconds
    res["gateway_cpu_us"] = ((gateway_cpu_s(node) - cpu_before) * 1e6 / requests
                             if requests else float("nan"))
    return res


def run_node(args, binary: str, workers: int, run: int) -> dict:
    """One run of every case against a fresh node with `workers` gateway processes."""
    os.environ["TOPICS_GATEWAY_WORKERS"] = str(workers)
    result = {}
    with NodeProcess(1) as node, tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(node.tmp, "ports.json")) as handle:
            port = json.load(handle)["http"]
        for shape, (records, connections) in args.shapes.items():
            for cls in args.classes:
                topic = f"b-{cls}-{shape}-{run}"
                http(port, "PUT", f"/v0/topics/{topic}", {"durability": cls})
                res = measure(args, binary, node, port, tmp, topic, batch_body(records),
                              connections)
                res["records_per_s"] = res["requests_per_s"] * records
                result[f"{cls}/{shape}"] = res
                http(port, "DELETE", f"/v0/topics/{topic}")
                log.info("workers %d run %d %s/%s: %.0f rec/s p50 %.2f ms p99 %.2f ms "
                         "gateway CPU %.1f us/request non-2xx %d", workers, run, cls, shape,
                         res["records_per_s"], res["p50_ms"], res["p99_ms"],
                         res["gateway_cpu_us"], res["non_2xx"])
        if not args.no_diff:
            result["diff"] = measure_diff(args, binary, node, port, tmp, run)
    return result


def measure_diff(args, binary: str, node: NodeProcess, port: int, tmp: str,
                 run: int) -> dict:
    topic = f"b-diff-{run}"
    for _ in range(DIFF_LIMIT // 100):
        http(port, "POST", f"/v0/topics/{topic}", json.loads(batch_body(100)))
    page = http(port, "POST", f"/v0/topics/{topic}/diff", {"limit": DIFF_LIMIT})
    assert len(page["records"]) == DIFF_LIMIT, len(page["records"])
    body = json.dumps({"from_seq": 0, "limit": DIFF_LIMIT}).encode()
    res = measure(args, binary, node, port, tmp, f"{topic}/diff", body, DIFF_CONNECTIONS)
    res["records_per_s"] = res["requests_per_s"] * DIFF_LIMIT
    log.info("diff run %d: %.0f rec/s p50 %.2f ms", run, res["records_per_s"], res["p50_ms"])
    http(port, "DELETE", f"/v0/topics/{topic}")
    return res


def zmq_figures(args) -> list[dict]:
    """One run of the ZeroMQ client on the same shapes, from append_bench.py (its own
    node)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "append_bench.py")
        subprocess.run([sys.executable, script, "--no-redis", "--batch", str(args.batch),
                        "--runs", "1", "--seconds", str(args.seconds),
                        "--warmup", str(args.warmup), "--shapes", ",".join(args.shapes),
                        "--classes", ",".join(args.classes), "--json", out.name],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out.name) as handle:
            return json.load(handle)["runs"]


def _k(value: float) -> str:
    return "n/a" if value != value else (f"{value / 1000:.1f} K" if value >= 1000
                                         else f"{value:.0f}")


def _cell(runs: list[dict], key: str) -> tuple[str, float]:
    rates = spread(r[key]["records_per_s"] for r in runs if key in r)
    p50 = spread(r[key]["p50_ms"] for r in runs if key in r)
    p99 = spread(r[key]["p99_ms"] for r in runs if key in r)
    text = (f"{_k(rates['median'])} ({_k(rates['min'])}–{_k(rates['max'])}), "
            f"p50 {p50['median']:.2f} ms, p99 {p99['median']:.2f} ms")
    cpu = [r[key]["gateway_cpu_us"] for r in runs if "gateway_cpu_us" in r.get(key, {})]
    if cpu:
        text += f", gateway {spread(cpu)['median']:.0f} us CPU/request"
    return text, rates["median"]


def _run_ratio(http_runs: list[dict], zmq_runs: list[dict], key: str) -> str:
    """The median of each run's own ratio (HTTP run i against ZeroMQ run i), min-max."""
    ratios = [h[key]["records_per_s"] / z[key]["records_per_s"]
              for h, z in zip(http_runs, zmq_runs)
              if key in h and key in z and z[key]["records_per_s"]]
    if not ratios:
        return "n/a"
    found = spread(ratios)
    return f"{found['median']:.2f}× ({found['min']:.2f}–{found['max']:.2f})"


def render(args, http_runs: dict[int, list[dict]], zmq_runs: list[dict]) -> str:
    workers = sorted(http_runs)
    head = ["case"] + [f"HTTP, {w} gateway{'s' if w > 1 else ''}" for w in workers]
    head += ["ZeroMQ client"] + [f"HTTP {w}gw ÷ ZeroMQ (per-run ratios)" for w in workers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cases = [(f"{cls}/{shape}", f"`{cls}`, {records} rec/request, {connections} connections")
             for shape, (records, connections) in args.shapes.items()
             for cls in args.classes]
    if not args.no_diff:
        cases.append(("diff", f"diff reads, {DIFF_LIMIT} rec/request, {DIFF_CONNECTIONS} "
                      "connections"))
    for key, label in cases:
        cells, medians = [], []
        for w in workers:
            text, median = _cell(http_runs[w], key)
            cells.append(text)
            medians.append(median)
        zmq_text, zmq = (_cell(zmq_runs, key) if zmq_runs and key != "diff"
                         else ("not measured", float("nan")))
        ratios = [f"{m / zmq:.2f}× ({_run_ratio(http_runs[w], zmq_runs, key)})"
                  if zmq == zmq and zmq else "n/a" for w, m in zip(workers, medians)]
        lines.append("| " + " | ".join([label, *cells, zmq_text, *ratios]) + " |")
    non_2xx = sum(r[k].get("non_2xx", 0) for runs in http_runs.values() for r in runs
                  for k in r)
    lines.append(f"\nrecords/s, median (min–max) of {args.runs} runs of {args.seconds} s; "
                 f"latency medians of the runs' own percentiles; each run's HTTP cases "
                 f"then its ZeroMQ cases. Non-2xx responses: {non_2xx}.")
    return "\n".join(lines)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    binary = ensure_wrk()
    http_runs: dict[int, list[dict]] = {w: [] for w in args.workers}
    zmq_runs: list[dict] = []
    for run in range(args.runs):
        for w in args.workers:
            http_runs[w].append(run_node(args, binary, w, run))
        if not args.no_zmq:
            zmq_runs += zmq_figures(args)
            for key, res in zmq_runs[-1].items():
                if isinstance(res, dict) and "records_per_s" in res:
                    log.info("zmq run %d %s: %.0f rec/s", run, key, res["records_per_s"])
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"http": http_runs, "zmq": zmq_runs}, handle, indent=1, default=str)
    print(render(args, http_runs, zmq_runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
