"""Where one event's time goes: latency and CPU per event, per process, for the per-event
paths of the engine.

    python tools/bench/event_trip.py [--tree PATH] [--events 2000] [--watchers 1000]

Each path runs against a fresh node of `--tree` (default: this checkout; point it at
another checkout to compare before and after) with 2 shards and 1 gateway, driven one event
at a time by this process (a keep-alive HTTP connection, or the ZeroMQ client), so the
latency is one event's whole trip. For each path: the client's p50, and CPU microseconds
per event of each process (user = the process's own code, Python or C; sys = the kernel
working for it: syscalls, wake-ups of the peers it writes to), summed over the processes
the event crosses; what the p50 has beyond the CPU on its way is waiting (a process
asleep until the kernel runs it, fsync). The SSE fan-out at `--watchers` uses the original's
probe (`topics-probe broadcast`, see ../shared/peers) as its load when it is built: its
Rust watchers cost this machine little, so the gateway's CPU per delivery is the figure.

Paths: `health` (the gateway alone), `append` (an ephemeral single-record append over
HTTP), `append_fsync` (the same, fsync class), `tail` (a caught-up diff over HTTP),
`zmq_append` (the ZeroMQ client to the shard, no gateway), `router` (append to a routed
source, then read the destination until the copy shows, as the probe does; source and
destination on different shards), `router_same` (the same, both on one shard), `sse_1` (one
watch stream: append to its topic, until the record arrives), `sse_fanout` (the probe's
broadcast at `--watchers`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import psutil

_HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.expanduser("~/.cache/topics-peers/topics-probe")
PATHS = ("health", "append", "append_fsync", "tail", "zmq_append", "router", "router_same",
         "sse_1", "sse_fanout")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default=os.path.dirname(os.path.dirname(_HERE)),
                   help="the checkout whose node runs")
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--watchers", type=int, default=1000)
    p.add_argument("--paths", default=",".join(PATHS))
    args = p.parse_args(argv)
    args.paths = [x for x in args.paths.split(",") if x]
    return args


class Http:
    def __init__(self, port: int):
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def call(self, method: str, path: str, body=None) -> dict:
        data = json.dumps(body) if body is not None else None
        self.conn.request(method, path, body=data,
                          headers={"Content-Type": "application/json"} if data else {})
        reply = self.conn.getresponse()
        raw = reply.read()
        return json.loads(raw) if raw else {}


def processes(node) -> dict[str, psutil.Process]:
    status = node.client.status()
    out = {f"{p['role']}": psutil.Process(p["pid"]) for p in status["processes"]
           if p["role"] == "gateway"}
    out.update({f"shard{s['shard']}": psutil.Process(s["pid"]) for s in status["shards"]})
    out["client"] = psutil.Process()
    return out


def measure(node, run, events: int) -> dict:
    """Run `run()` `events` times (after a warm-up); p50 and CPU per event per process."""
    for _ in range(min(200, events)):
        run()
    procs = processes(node)
    before = {k: p.cpu_times() for k, p in procs.items()}
    times = []
    for _ in range(events):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    after = {k: p.cpu_times() for k, p in procs.items()}
    times.sort()
    cpu = {k: ((after[k].user - before[k].user) * 1e6 / events,
               (after[k].system - before[k].system) * 1e6 / events) for k in procs}
    return {"p50_us": times[len(times) // 2] * 1e6, "cpu_us": cpu}


def path_runner(name: str, node, http: Http):
    """The function that makes one event of path `name` (after its set-up)."""
    record = {"records": [{"data": {"x": 1}}]}
    if name == "health":
        return lambda: http.call("GET", "/v0/health")
    if name in ("append", "append_fsync", "tail"):
        topic = name
        http.call("PUT", f"/v0/topics/{topic}",
                  {"durability": "fsync" if name == "append_fsync" else "ephemeral"})
        if name == "tail":
            head = http.call("POST", f"/v0/topics/{topic}", record)["head_seq"]
            return lambda: http.call("POST", f"/v0/topics/{topic}/diff", {"from_seq": head})
        return lambda: http.call("POST", f"/v0/topics/{topic}", record)
    if name == "zmq_append":
        node.client.put_topic("zmq", durability="ephemeral")
        return lambda: node.client.append("zmq", [{"data": {"x": 1}}])
    if name in ("router", "router_same"):
        source = "rsrc" if name == "router" else "rsamex"   # shard 1; shard 0, as rdst
        return router_runner(http, record, source)
    if name == "sse_1":
        return sse_runner(node, http, record)
    raise ValueError(name)


def router_runner(http: Http, record: dict, source: str):
    for topic in (source, "rdst"):
        http.call("PUT", f"/v0/topics/{topic}", {})
    http.call("PUT", "/v0/routers/rbench", {"source": source, "dest": "rdst"})

    def run():
        head = http.call("GET", "/v0/topics/rdst")["head_seq"]
        http.call("POST", f"/v0/topics/{source}", record)
        while not http.call("POST", "/v0/topics/rdst/diff", {"from_seq": head})["records"]:
            time.sleep(0.001)       # as the probe does
    return run


def sse_runner(node, http: Http, record: dict):
    """One watch stream on its own thread; an event = append, until the record arrives."""
    http.call("PUT", "/v0/topics/sse", {"durability": "ephemeral"})
    session = http.call("POST", "/v0/watch", {"topics": {"sse": {"tail": True}}})
    sock = socket.create_connection(("127.0.0.1", node.ports["http"]))
    sock.sendall(f"GET {session['stream_url']} HTTP/1.1\r\nhost: b\r\n"
                 "accept: text/event-stream\r\n\r\n".encode())
    arrived = threading.Semaphore(0)

    def read():
        while True:
            data = sock.recv(65536)
            if not data:
                return
            for _ in range(data.count(b"event: record")):
                arrived.release()
    threading.Thread(target=read, daemon=True).start()

    def run():
        http.call("POST", "/v0/topics/sse", record)
        if not arrived.acquire(timeout=10):
            raise TimeoutError("the record never arrived")
    return run


def fanout(node, watchers: int) -> dict | None:
    """The probe's broadcast at `watchers`: its p50 and the node's CPU per delivery."""
    if not os.access(PROBE, os.X_OK):
        return None
    procs = processes(node)
    del procs["client"]
    before = {k: p.cpu_times() for k, p in procs.items()}
    done = subprocess.run([PROBE, "broadcast", f"http://127.0.0.1:{node.ports['http']}",
                           "--watchers", str(watchers), "--pulses", "50", "--json"],
                          capture_output=True, timeout=600)
    after = {k: p.cpu_times() for k, p in procs.items()}
    tier = json.loads(done.stdout)["tiers"][f"watchers_{watchers}"]
    deliveries = max(1, tier["deliveries_measured"])
    return {"p50_us": tier["write_to_deliver_latency"]["p50_ms"] * 1000,
            "cpu_us": {k: ((after[k].user - before[k].user) * 1e6 / deliveries,
                           (after[k].system - before[k].system) * 1e6 / deliveries)
                       for k in procs}, "per": "delivery (set-up of the streams included)"}


def run_paths(args) -> dict:
    sys.path.insert(0, os.path.join(args.tree, "tools", "bench"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (args.tree, os.environ.get("PYTHONPATH", "")) if p)
    from node_proc import NodeProcess       # the tree's: its node runs the tree's code
    results = {}
    for name in args.paths:
        with NodeProcess(2) as node:
            if name == "sse_fanout":
                found = fanout(node, args.watchers)
                if found is not None:
                    results[name] = found
                continue
            http = Http(node.ports["http"])
            results[name] = measure(node, path_runner(name, node, http), args.events)
    return results


def report(results: dict) -> str:
    lines = ["| path | p50 us | CPU us per event: user + sys, by process | on the way | "
             "waiting |", "|---|---:|---|---:|---:|"]
    for name, found in results.items():
        cpu = {k: v for k, v in found["cpu_us"].items() if sum(v) >= 1}
        cells = ", ".join(f"{k} {u:.0f}+{s:.0f}" for k, (u, s) in cpu.items())
        total = sum(sum(v) for v in cpu.values())
        waiting = max(0.0, found["p50_us"] - total) if name != "sse_fanout" else float("nan")
        lines.append(f"| {name} | {found['p50_us']:.0f} | {cells} | {total:.0f} | "
                     f"{'n/a' if waiting != waiting else f'{waiting:.0f}'} |")
    lines.append("\nCPU is the mean per event over the run, the p50 the client's; the client "
                 "(this process, Python) is one of the processes an event crosses. sse_fanout: "
                 "per delivery, the probe's p50.")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    print(report(run_paths(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
