"""How fast a node is ready and how much memory it holds, beside the original.

    flock /work/rooms/.bench.lock python3 tools/bench/start_bench.py [--runs 10]
        [--records 1000000] [--no-original] [--per-process] [--json OUT]

Empty: `--runs` times, a fresh empty data dir, `python -m supervisor.cli serve` (this
checkout; the `topics` script's shim would add its own start) or the original binary,
each with its defaults and only TOPICS_HOST, TOPICS_PORT and TOPICS_DATA_DIR set; timed from
just before the spawn to the first `GET /v0/ready` that answers 200 (polled every 5 ms).
`--settle` seconds later the PSS (/proc/<pid>/smaps_rollup: proportional set size, each
shared page split among the processes that map it) is summed over the server and every
process under it. The two servers take turns going first. `--per-process` adds a table:
each process's PSS, its anonymous part and its USS (pages it shares with no one), medians
over the runs, and the sum. `--spawn-too` adds this project with TOPICS_FORK_SERVER=0
(every child a fresh interpreter, as before the fork server).

With `--records N`: one more data dir per server, loaded over HTTP with N records of 100
bytes (each server's default class: `disk` on both) into 10 topics in
1000-record appends from 4 connections; then the PSS loaded, and `--runs` times kill -9 of
the whole process group, restart, time to ready and the PSS once settled.

Markdown on stdout, progress on stderr; medians with min-max.
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
import threading
import time
import urllib.request

import psutil

log = logging.getLogger("start_bench")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORIGINAL = os.path.expanduser("~/.cache/topics-peers/topics-original")
READY_DEADLINE_S = 120.0
POLL_S = 0.005
TOPICS = 10
BATCH = 1000
LOADERS = 4


def free_low_port() -> int:
    """A free port below the kernel's ephemeral range, with the next one free too (ours
    puts its ZeroMQ front there)."""
    for port in range(24000 + os.getpid() % 400 * 10, 32000, 2):
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


class Server:
    """One server process group on a data dir: spawn, time to ready, PSS, kill, stop."""

    def __init__(self, kind: str, data_dir: str, original: str):
        self.kind, self.data_dir, self.original = kind, data_dir, original
        self.proc: subprocess.Popen | None = None
        self.port = 0

    # this project's variants: their extra environment
    VARIANTS = {"ours": {}, "ours-spawn": {"TOPICS_FORK_SERVER": "0"}}

    def argv(self) -> list[str]:
        if self.kind == "original":
            return [self.original]
        return [sys.executable, "-m", "supervisor.cli", "serve"]

    def start(self) -> float:
        """Spawn and wait for /v0/ready 200; the seconds it took."""
        self.port = free_low_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOPICS_")}
        env.update(TOPICS_HOST="127.0.0.1", TOPICS_PORT=str(self.port),
                   TOPICS_DATA_DIR=self.data_dir,
                   PYTHONPATH=os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p),
                   **self.VARIANTS.get(self.kind, {}))
        began = time.perf_counter()
        self.proc = subprocess.Popen(self.argv(), env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        url = f"http://127.0.0.1:{self.port}/v0/ready"
        while time.perf_counter() - began < READY_DEADLINE_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited {self.proc.returncode} while starting")
            try:
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        return time.perf_counter() - began
            except OSError:
                pass
            time.sleep(POLL_S)
        raise TimeoutError(f"{self.kind} not ready in {READY_DEADLINE_S:.0f} s")

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.proc.pid)
        return [root, *sorted(root.children(recursive=True), key=lambda proc: proc.pid)]

    def pss_rows(self) -> list[dict]:
        """One row per process of the group: its name (process_name), PSS, the anonymous
        part of it and USS (its private pages, shared with no one), in bytes, from
        /proc/<pid>/smaps_rollup."""
        rows = []
        for proc in self.processes():
            try:
                fields = _rollup(proc.pid)
                name = process_name(proc.cmdline())
            except (psutil.NoSuchProcess, OSError):
                continue
            rows.append({"name": name, "pss": fields["Pss"] * 1024,
                         "anon": fields["Pss_Anon"] * 1024,
                         "uss": (fields["Private_Clean"] + fields["Private_Dirty"]) * 1024})
        ordinal: dict[str, int] = {}
        for row in rows:           # shard-0, shard-1, gateway-0: in pid (spawn) order
            if row["name"] in ("shard", "gateway"):
                n = ordinal[row["name"]] = ordinal.get(row["name"], -1) + 1
                row["name"] = f"{row['name']}-{n}"
        return rows

    def pss_bytes(self) -> tuple[int, int, int]:
        """(PSS summed over the group, the anonymous part of it, how many processes). The
        rest is file pages mapped (the interpreter's library, a WAL or segment file read
        through mmap): page cache the kernel can drop, which PSS counts all the same, and
        shares among every process on the machine that maps the same file."""
        rows = self.pss_rows()
        return sum(r["pss"] for r in rows), sum(r["anon"] for r in rows), len(rows)

    def kill(self) -> None:
        """SIGKILL the whole group and wait until every member is gone."""
        members = self.processes()
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        psutil.wait_procs(members, timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        self.kill() if self.proc.poll() is None else None
        self.proc = None


def _rollup(pid: int) -> dict[str, int]:
    """/proc/<pid>/smaps_rollup's kB fields."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    return fields


def process_name(cmdline: list[str]) -> str:
    """A node process's role from its command line: supervisor, fork server, shard,
    compactor, reclaimer, gateway; else the program's name (the original's binary)."""
    line = " ".join(cmdline)
    if "fork server" in line:
        return "fork server"
    if "supervisor.cli" in line:
        return "supervisor"
    for word in cmdline:
        if word.startswith("topics_actors."):
            return word.split(".")[1]
    return os.path.basename(cmdline[0]) if cmdline else "?"


def post(port: int, path: str, body: dict) -> None:
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        reply.read()


def load(server: Server, records: int) -> float:
    """N records of 100 bytes into TOPICS topics, over HTTP; the seconds it took."""
    pad = "x" * 88                        # {"n":<int>,"p":"<pad>"} is about 100 bytes
    batches = [(f"load-{i % TOPICS}", i) for i in range(records // BATCH)]
    began = time.monotonic()

    def loader(part: list) -> None:
        for topic, i in part:
            body = {"records": [{"data": {"n": i * BATCH + j, "p": pad}} for j in range(BATCH)]}
            post(server.port, f"/v0/topics/{topic}", body)
    threads = [threading.Thread(target=loader, args=(batches[k::LOADERS],))
               for k in range(LOADERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - began


def empty_runs(args, kinds: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for run in range(args.runs):
        for kind in kinds[run % len(kinds):] + kinds[:run % len(kinds)]:
            tmp = tempfile.mkdtemp(prefix=f"start-{kind}-")
            server = Server(kind, os.path.join(tmp, "data"), args.original)
            try:
                ready_s = server.start()
                time.sleep(args.settle)
                rows = server.pss_rows()
            finally:
                server.stop()
                shutil.rmtree(tmp, ignore_errors=True)
            pss, anon = sum(r["pss"] for r in rows), sum(r["anon"] for r in rows)
            out[kind].append({"ready_s": ready_s, "pss": pss, "anon": anon,
                              "processes": len(rows), "rows": rows})
            log.info("empty %s run %d: ready %.3f s, PSS %.1f MB in %d processes", kind,
                     run + 1, ready_s, pss / 1e6, len(rows))
    return out


def loaded_runs(args, kind: str) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"start-{kind}-loaded-")
    server = Server(kind, os.path.join(tmp, "data"), args.original)
    try:
        server.start()
        load_s = load(server, args.records)
        time.sleep(args.settle)
        loaded_pss, loaded_anon, _ = server.pss_bytes()
        log.info("%s loaded %d records in %.1f s, PSS %.1f MB", kind, args.records, load_s,
                 loaded_pss / 1e6)
        restarts = []
        for run in range(args.runs):
            server.kill()
            ready_s = server.start()
            time.sleep(args.settle)
            pss, anon, count = server.pss_bytes()
            restarts.append({"ready_s": ready_s, "pss": pss, "anon": anon, "processes": count})
            log.info("%s restart %d: ready %.3f s, PSS %.1f MB", kind, run + 1, ready_s,
                     pss / 1e6)
        return {"load_s": load_s, "loaded_pss": loaded_pss, "loaded_anon": loaded_anon,
                "restarts": restarts}
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def med(values: list[float], unit: float, fmt: str) -> str:
    return (f"{statistics.median(values) / unit:{fmt}} ({min(values) / unit:{fmt}}-"
            f"{max(values) / unit:{fmt}})")


def per_process(empty: dict) -> str:
    """Each process's PSS, its anonymous part and its USS, idle on an empty data dir:
    medians over the runs (a process's name: process_name, numbered per role)."""
    lines = ["| server | process | PSS, MB | of which anonymous, MB | USS, MB |",
             "|---|---|---:|---:|---:|"]
    for kind, runs in empty.items():
        names = list(dict.fromkeys(r["name"] for run in runs for r in run["rows"]))
        for name in names:
            rows = [r for run in runs for r in run["rows"] if r["name"] == name]
            cells = [statistics.median(r[key] for r in rows) / 1e6
                     for key in ("pss", "anon", "uss")]
            lines.append(f"| {kind} | {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
        sums = [statistics.median(sum(r[key] for r in run["rows"]) for run in runs) / 1e6
                for key in ("pss", "anon", "uss")]
        lines.append(f"| {kind} | **sum** | " + " | ".join(f"**{c:.1f}**" for c in sums)
                     + " |")
    return "\n".join(lines)


def report(empty: dict, loaded: dict, args) -> str:
    kinds = list(empty)
    lines = [f"start_bench: {args.runs} runs, medians (min-max); load average "
             f"{os.getloadavg()[0]:.2f} at the end", "",
             "| figure | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]

    def row(name: str, values_of, unit: float, fmt: str) -> None:
        cells = [med(values_of(kind), unit, fmt) if values_of(kind) else "" for kind in kinds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    row("empty data dir: spawn to /v0/ready 200, s", lambda k: [r["ready_s"] for r in
                                                               empty[k]], 1, ".3f")
    row("empty, idle: PSS of all processes, MB", lambda k: [r["pss"] for r in empty[k]],
        1e6, ".1f")
    row("empty, idle: of which anonymous, MB", lambda k: [r["anon"] for r in empty[k]],
        1e6, ".1f")
    lines.append("| processes | " + " | ".join(str(empty[k][0]["processes"]) for k in kinds)
                 + " |")
    if loaded:
        row(f"{args.records:,} records loaded: PSS, MB",
            lambda k: [loaded[k]["loaded_pss"]] if k in loaded else [], 1e6, ".1f")
        row(f"{args.records:,} records loaded: of which anonymous, MB",
            lambda k: [loaded[k]["loaded_anon"]] if k in loaded else [], 1e6, ".1f")
        row(f"{args.records:,} records: kill -9, spawn to ready, s",
            lambda k: [r["ready_s"] for r in loaded[k]["restarts"]] if k in loaded else [],
            1, ".3f")
        row(f"{args.records:,} records: after the restart, PSS, MB",
            lambda k: [r["pss"] for r in loaded[k]["restarts"]] if k in loaded else [],
            1e6, ".1f")
        row(f"{args.records:,} records: after the restart, anonymous, MB",
            lambda k: [r["anon"] for r in loaded[k]["restarts"]] if k in loaded else [],
            1e6, ".1f")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--records", type=int, default=0, help="also measure N records")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds after ready before the PSS is read")
    parser.add_argument("--original", default=ORIGINAL)
    parser.add_argument("--no-original", action="store_true")
    parser.add_argument("--spawn-too", action="store_true",
                        help="also this project without its fork server (TOPICS_FORK_SERVER=0)")
    parser.add_argument("--per-process", action="store_true",
                        help="also a table of each process's PSS, anonymous and USS, idle")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    kinds = ["ours"] + (["ours-spawn"] if args.spawn_too else [])
    if not args.no_original:
        if os.access(args.original, os.X_OK):
            kinds.append("original")
        else:
            log.warning("%s is not built: measuring this project alone", args.original)
    empty = empty_runs(args, kinds)
    loaded = {kind: loaded_runs(args, kind) for kind in kinds} if args.records else {}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"empty": empty, "loaded": loaded}, handle, indent=1)
    print(report(empty, loaded, args))
    if args.per_process:
        print()
        print(per_process(empty))
    return 0


if __name__ == "__main__":
    sys.exit(main())
