"""Bounded recovery: time to ready after a hard kill, and shard memory per stored record.

    python tools/bench/recovery_bench.py [--records N] [--topics T] [--record-bytes B]
                                         [--runs R] [--shards K] [--json PATH] [--keep]

One data dir (in a temp dir under /tmp, removed at the end unless --keep) lives through
the whole benchmark:

1. empty node starts (the floor of any restart), and the shards' memory when empty;
2. load N disk-class records of B bytes over T topics with checkpoints disabled (huge
   TOPICS_CHECKPOINT_INTERVAL_MS and TOPICS_CHECKPOINT_WAL_BYTES), memory when WAL-indexed;
3. (a) R times: SIGKILL the process group, start again, time spawn -> node_ready: a full
   WAL replay, since meta/ holds no snapshot (asserted every time);
4. restart with a short checkpoint interval, wait until every shard took in a snapshot
   covering all but a small WAL tail, memory after absorption;
5. (b) R times: SIGKILL, start again (checkpoints disabled), time to ready: snapshot + tail;
   memory after the last of these restarts.

Prints a markdown report (see docs/BENCHMARKS_HISTORY.md, "Recovery and memory"); progress goes to
stderr. Every node is killed by process group in `finally`, and the temp dir removed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import multiprocessing as mp
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_stats import spread  # noqa: E402  (sibling modules of this script)
from node_proc import (  # noqa: E402
    group_cpu_s, kill_group, machine_busy_s, process_memory, wait_port_file,
)
from report import engine_commit  # noqa: E402

from topics_actors.client import Client, TopicsError  # noqa: E402
from topics_actors.config import default_shards  # noqa: E402
from topics_actors.storage.fs import RealFs  # noqa: E402
from topics_actors.storage.snapshot import list_snapshots, load_newest  # noqa: E402
from topics_actors.storage.wal_layout import layout_generation  # noqa: E402
from topics_actors.topic_identity import shard_of_name  # noqa: E402

log = logging.getLogger(__name__)

NEVER = str(10**15)   # checkpoint cadence knobs set so high that no checkpoint ever falls due
NO_CHECKPOINTS = {"TOPICS_CHECKPOINT_INTERVAL_MS": NEVER, "TOPICS_CHECKPOINT_WAL_BYTES": NEVER}
CHECKPOINT_SOON = {"TOPICS_CHECKPOINT_INTERVAL_MS": "1000"}
WAL_FILE_BYTES = 64 * 1024 * 1024            # the default TOPICS_WAL_FILE_BYTES
TAIL_BYTES_OK = 64 * 1024                    # "the checkpoint covered everything"
PHASES = ("supervisor_up", "shard_spawn", "replay_scan", "writer_open", "seen_ready")
READY_POLL_S = 0.01
START_DEADLINE_S = 600.0
CHECKPOINT_DEADLINE_S = 900.0
FLOOR_SAMPLES = 5
READY_RE = re.compile(r"event=ready shard=(\d+) topics=(\d+) replay_s=([\d.]+)")
REPLAYED_RE = re.compile(r"event=replayed shard=(\d+) snapshot=(\d+) frames=(\d+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records to load")
    p.add_argument("--topics", type=int, default=10, help="topics they are spread over")
    p.add_argument("--record-bytes", type=int, default=100, help="bytes of each record's data")
    p.add_argument("--runs", type=int, default=3, help="restarts per case")
    p.add_argument("--shards", type=int, default=default_shards(),
                   help="WAL shards (default min(cpus, 8), as the node's own default)")
    p.add_argument("--batch", type=int, default=500, help="records per append while loading")
    p.add_argument("--client-procs", type=int, default=2, help="loading client processes")
    p.add_argument("--window", type=int, default=4, help="appends in flight per process")
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--keep", action="store_true", help="keep the data dir (path on stderr)")
    args = p.parse_args(argv)
    if min(args.records, args.topics, args.runs, args.shards, args.batch,
           args.client_procs, args.window) < 1 or args.record_bytes < 20:
        p.error("counts must be positive and --record-bytes at least 20")
    return args


# --- the node -------------------------------------------------------------------------------

class RecoveryNode:
    """`topics serve` on a data dir that outlives it: started, timed to ready, SIGKILLed."""

    def __init__(self, root: str, shards: int):
        self.root = root
        self.data_dir = os.path.join(root, "data")
        self.shards = shards
        self.proc: subprocess.Popen | None = None
        self.client: Client | None = None
        self.log_path = ""
        self.spawn_wall = 0.0
        self._log = None

    def start(self, label: str, env: dict) -> dict:
        """Spawn the node; return seconds from spawn to the port file and to node_ready."""
        port_file = os.path.join(self.root, "ports.json")
        if os.path.exists(port_file):
            os.unlink(port_file)
        self.log_path = os.path.join(self.root, f"node-{label}.log")
        self._log = open(self.log_path, "wb")
        full_env = dict(os.environ, TOPICS_DATA_DIR=self.data_dir, TOPICS_PORT="0",
                        TOPICS_ZMQ_PORT="0", TOPICS_PORT_FILE=port_file,
                        TOPICS_WAL_SHARDS=str(self.shards), **env)
        # The interpreter directly, not the `topics` console script: a pyenv shim in front
        # of it would add its own ~0.1 s of bash to every figure.
        busy0 = machine_busy_s()
        t0, self.spawn_wall = time.monotonic(), time.time()
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "serve"],
                                     env=full_env, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        ports = wait_port_file(port_file, t0 + START_DEADLINE_S, self._check_alive, 0.005)
        t_ports = time.monotonic()
        self.client = Client(f"tcp://127.0.0.1:{ports['zmq']}", request_timeout_ms=1_000,
                             retry_deadline_ms=30_000)
        while True:
            self._check_alive()
            try:
                if self.client.status().get("node_ready"):
                    break
            except TopicsError:
                pass
            if time.monotonic() > t0 + START_DEADLINE_S:
                raise TimeoutError(f"node not ready after {START_DEADLINE_S:.0f} s")
            time.sleep(READY_POLL_S)
        ready_s = time.monotonic() - t0
        # Cores the rest of the machine took meanwhile (neighbours): a noise gauge.
        other = machine_busy_s() - busy0 - group_cpu_s(self.proc.pid)
        return {"ready_s": ready_s, "port_file_s": t_ports - t0,
                "other_cores": max(0.0, other / ready_s)}

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"topics serve exited with {self.proc.returncode}; "
                               f"see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the whole group (a crash); safe to call when nothing runs."""
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.proc is not None:
            kill_group(self.proc)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def shard_pids(self) -> list[int]:
        return [s["pid"] for s in self.client.status()["shards"]]

    def recovery_log(self) -> dict:
        """Per shard: replay_s, topics (event=ready), frames, snapshot (event=replayed), and
        when (s after spawn, from the log's ms timestamps) it logged replayed and ready;
        plus when the supervisor listened."""
        with open(self.log_path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        shards: dict[int, dict] = {}
        listening = math.nan
        for line in text.splitlines():
            if (m := READY_RE.search(line)) is not None:
                shards.setdefault(int(m[1]), {}).update(
                    topics=int(m[2]), replay_s=float(m[3]), ready_at=self._at(line))
            elif (m := REPLAYED_RE.search(line)) is not None:
                shards.setdefault(int(m[1]), {}).update(
                    snapshot=int(m[2]), frames=int(m[3]), replayed_at=self._at(line))
            elif "event=listening" in line and listening != listening:
                listening = self._at(line)
        return {"shards": shards, "listening_at": listening,
                "wal_rotations": text.count("event=wal_rotated")}

    def _at(self, line: str) -> float:
        try:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
        except ValueError:
            return math.nan
        return stamp.timestamp() - self.spawn_wall

    def snapshots(self) -> list:
        return list_snapshots(RealFs(), self.data_dir)


# --- memory ---------------------------------------------------------------------------------

def dir_bytes(path: str) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(base, name))
            except OSError:
                pass
    return total


# --- loading --------------------------------------------------------------------------------

def make_records(count: int, size: int) -> list[dict]:
    """`count` records whose `data` serialises to `size` bytes of compact JSON."""
    records = []
    for i in range(count):
        data = {"i": i, "k": "bench", "p": ""}
        data["p"] = "x" * max(0, size - len(json.dumps(data, separators=(",", ":"))))
        records.append({"data": data})
    return records


def balanced_topics(count: int, shards: int) -> list[str]:
    """Topic names spread evenly over the shards, so no shard replays more than its share."""
    per_shard = -(-count // shards)
    taken: dict[int, int] = {}
    names = []
    for i in range(1_000_000):
        if len(names) == count:
            break
        name = f"recovery-{i}"
        shard = shard_of_name(name, shards)
        if taken.get(shard, 0) < per_shard:
            taken[shard] = taken.get(shard, 0) + 1
            names.append(name)
    return names


async def _load(job: dict) -> dict:
    import asyncio

    from topics_actors.client import AsyncClient

    batch = make_records(job["batch"], job["record_bytes"])
    work = [(topic, n) for topic, total in job["topics"]
            for n in [job["batch"]] * (total // job["batch"]) + [total % job["batch"]] if n]
    done = {"records": 0, "appends": 0}

    async def worker(client) -> None:
        while work:
            topic, n = work.pop()
            await client.append(topic, batch[:n])
            done["records"] += n
            done["appends"] += 1

    async with AsyncClient(job["endpoint"], request_timeout_ms=10_000,
                           retry_deadline_ms=120_000) as client:
        await asyncio.gather(*(worker(client) for _ in range(job["window"])))
    return done


def load_part(job: dict) -> dict:
    """Entry of one loading process (spawned: no ZeroMQ state crosses a fork)."""
    import asyncio

    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle
    return asyncio.run(_load(job))


def load(node: RecoveryNode, args, topics: list[str]) -> dict:
    for topic in topics:
        node.client.put_topic(topic, durability="disk")
    per_topic = [args.records // len(topics) + (1 if i < args.records % len(topics) else 0)
                 for i in range(len(topics))]
    jobs = [{"endpoint": node.client.endpoint, "batch": args.batch, "window": args.window,
             "record_bytes": args.record_bytes,
             "topics": list(zip(topics, per_topic))[p::args.client_procs]}
            for p in range(args.client_procs)]
    t0 = time.monotonic()
    # Pool's exit terminates the workers, so an interrupted load leaves none behind.
    with mp.get_context("spawn").Pool(args.client_procs) as pool:
        parts = pool.map(load_part, jobs)
    seconds = time.monotonic() - t0
    loaded = sum(p["records"] for p in parts)
    heads = sum(node.client.get_topic(t, touch=False)["head_seq"] for t in topics)
    if loaded != args.records or heads < args.records:
        raise RuntimeError(f"loaded {loaded} records, heads sum to {heads}, "
                           f"expected {args.records}")
    log.info("loaded %d records in %.1f s (%.0f records/s)", loaded, seconds, loaded / seconds)
    return {"seconds": seconds, "records_per_s": loaded / seconds, "heads": heads}


# --- the phases -----------------------------------------------------------------------------

def spawn_floor(node: RecoveryNode) -> dict:
    """Seconds to spawn an interpreter and exit: bare, and importing what the supervisor and
    a shard import before they do anything (the node spawns those two one after the other)."""
    cases = {"python -c pass": "pass",
             "supervisor imports": "import supervisor.cli",
             "shard imports": "import topics_actors.shard.__main__"}
    env = dict(os.environ, TOPICS_DATA_DIR=node.data_dir)
    out = {}
    for name, code in cases.items():
        samples = []
        for i in range(FLOOR_SAMPLES + 1):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", code], env=env, check=True,
                           stdin=subprocess.DEVNULL)
            if i:   # the first one warms the page cache and is dropped
                samples.append(time.monotonic() - t0)
        out[name] = spread(samples)
    return out


def restart(node: RecoveryNode, label: str, env: dict, topics: list[str], records: int) -> dict:
    """SIGKILL the running node, start it again, time it, read what recovery logged."""
    node.kill()
    load1 = os.getloadavg()[0]
    result = node.start(label, env)
    recovery = node.recovery_log()
    shards = recovery["shards"]
    if len(shards) != node.shards or any("replay_s" not in s for s in shards.values()):
        raise RuntimeError(f"{label}: no event=ready/replayed line for every shard in "
                           f"{node.log_path}: {shards}")
    result.update(shards=shards, load1_before=load1, wal_rotations=recovery["wal_rotations"],
                  replay_s_max=max(s["replay_s"] for s in shards.values()),
                  frames=sum(s.get("frames", 0) for s in shards.values()),
                  snapshot_files=[snap_id for snap_id, _ in node.snapshots()],
                  phases=phases(result["ready_s"], recovery))
    heads = sum(node.client.get_topic(t, touch=False)["head_seq"] for t in topics)
    if heads < records:
        raise RuntimeError(f"{label}: heads sum to {heads} after recovery, below {records}")
    result["heads"] = heads
    log.info("%s: ready in %.3f s (slowest shard replay %.3f s, %d frames, snapshot files %s)",
             label, result["ready_s"], result["replay_s_max"], result["frames"],
             result["snapshot_files"])
    return result


def phases(ready_s: float, recovery: dict) -> dict:
    """Where the time to ready went, along the slowest shard (the last to log ready)."""
    last = max(recovery["shards"].values(), key=lambda s: s["ready_at"])
    serving = last["ready_at"] - last["replay_s"]   # the shard's serve() began
    return {"supervisor_up": recovery["listening_at"],
            "shard_spawn": serving - recovery["listening_at"],
            "replay_scan": last.get("replayed_at", math.nan) - serving,
            "writer_open": last["ready_at"] - last.get("replayed_at", math.nan),
            "seen_ready": ready_s - last["ready_at"]}


def tail_bytes(position, wal_position) -> int:
    """WAL bytes a shard has written after a snapshot's position of its group."""
    if position is None:
        return 1 << 62
    return (wal_position[0] - position[0]) * WAL_FILE_BYTES + wal_position[1] - position[1]


def checkpoint_covered(node: RecoveryNode) -> dict | None:
    """The newest snapshot, if every shard took it in and it leaves a small WAL tail."""
    fs = RealFs()
    found = load_newest(fs, node.data_dir)
    if found is None:
        return None
    snap_id, body = found
    generation = layout_generation(fs, node.data_dir)
    statuses = node.client.shard_statuses()
    tails = [tail_bytes(body["positions"].get(f"{generation:04d}/shard-{s['shard']:02d}"),
                        s["wal_position"]) for s in statuses]
    if any(s["snapshot_id"] < snap_id for s in statuses) or max(tails) > TAIL_BYTES_OK:
        return None
    return {"snapshot_id": snap_id, "tail_bytes": tails}


def take_checkpoint(node: RecoveryNode, topics: list[str], records: int) -> dict:
    """Restart once with a short checkpoint interval and wait until a snapshot covers
    everything loaded; memory of the shards once they absorbed it."""
    result = restart(node, "checkpoint", CHECKPOINT_SOON, topics, records)
    t0 = time.monotonic()
    while (covered := checkpoint_covered(node)) is None:
        if time.monotonic() - t0 > CHECKPOINT_DEADLINE_S:
            raise TimeoutError(f"no covering checkpoint after {CHECKPOINT_DEADLINE_S:.0f} s")
        time.sleep(0.25)
    result.update(covered, wait_s=time.monotonic() - t0)
    with open(node.log_path, "rb") as handle:
        text = handle.read().decode("utf-8", "replace")
    result["checkpoint_s"] = [float(s) for s in re.findall(
        r"event=checkpoint snapshot=\d+ .*seconds=([\d.]+)", text)]
    log.info("checkpoint: snapshot %d covers all but %s bytes of WAL after %.1f s "
             "(checkpoints took %s s)", result["snapshot_id"], result["tail_bytes"],
             result["wait_s"], result["checkpoint_s"])
    return result


def settled_memory(node: RecoveryNode) -> dict:
    time.sleep(1.0)   # let the last replies, flushes and heartbeats finish allocating
    return process_memory(node.shard_pids())


def data_usage(node: RecoveryNode) -> dict:
    return {name: dir_bytes(os.path.join(node.data_dir, name))
            for name in sorted(os.listdir(node.data_dir))
            if os.path.isdir(os.path.join(node.data_dir, name)) and name != "run"}


def run(args, node: RecoveryNode) -> dict:
    res: dict = {"floor": spawn_floor(node), "memory": {}}
    topics = balanced_topics(args.topics, args.shards)
    res["empty"] = []
    for r in range(args.runs):
        res["empty"].append(restart(node, f"empty-{r}", NO_CHECKPOINTS, [], 0))
    res["memory"]["empty"] = settled_memory(node)
    res["load"] = load(node, args, topics)
    res["memory"]["loaded"] = settled_memory(node)
    res["disk_loaded"] = data_usage(node)
    res["full_replay"] = []
    for r in range(args.runs):
        one = restart(node, f"full-{r}", NO_CHECKPOINTS, topics, args.records)
        if one["snapshot_files"] or any(s.get("snapshot") for s in one["shards"].values()):
            raise RuntimeError(f"a snapshot appeared during the no-snapshot case: {one}")
        res["full_replay"].append(one)
    res["memory"]["replayed"] = settled_memory(node)
    res["checkpoint"] = take_checkpoint(node, topics, args.records)
    res["memory"]["absorbed"] = settled_memory(node)
    res["disk_checkpointed"] = data_usage(node)
    res["after_checkpoint"] = []
    for r in range(args.runs):
        one = restart(node, f"snapshot-{r}", NO_CHECKPOINTS, topics, args.records)
        if not one["snapshot_files"]:
            raise RuntimeError("the snapshot disappeared")
        res["after_checkpoint"].append(one)
    res["memory"]["restarted"] = settled_memory(node)
    return res


# --- the report -----------------------------------------------------------------------------

def _s(value: float) -> str:
    return "n/a" if value != value else f"{value:.3f} s"


def _spread_s(values: list[float]) -> str:
    stat = spread(values)
    if stat["n"] == 0:
        return "n/a"
    if stat["n"] == 1:
        return _s(stat["median"])
    return f"**{stat['median']:.3f} s** ({stat['min']:.3f}–{stat['max']:.3f})"


def _mib(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"


def time_rows(res: dict) -> list[str]:
    rows = []
    for key, label in (("full_replay", "(a) full WAL replay, no snapshot"),
                       ("after_checkpoint", "(b) snapshot + WAL tail, after a checkpoint"),
                       ("empty", "empty data dir (floor of any restart)")):
        runs = res[key]
        frames = statistics.median(r["frames"] for r in runs)
        rate = statistics.median(r["frames"] / r["replay_s_max"] if r["frames"]
                                 else math.nan for r in runs)
        rest = statistics.median(r["ready_s"] - r["replay_s_max"] for r in runs)
        other = statistics.median(r["other_cores"] for r in runs)
        rows.append(f"| {label} | {_spread_s([r['ready_s'] for r in runs])} | "
                    f"{_spread_s([r['replay_s_max'] for r in runs])} | {frames:,.0f} | "
                    f"{'n/a' if rate != rate else f'{rate / 1e6:.2f} M/s'} | {_s(rest)} | "
                    f"{other:.2f} |")
    for name, stat in res["floor"].items():
        rows.append(f"| spawn `python -c` + exit: {name} | "
                    f"{stat['median']:.3f} s ({stat['min']:.3f}–{stat['max']:.3f}) | | | | | |")
    return rows


def phase_rows(res: dict) -> list[str]:
    """Medians over the restarts of each step between spawn and node_ready (log stamps)."""
    rows = []
    for key, label in (("full_replay", "(a) full WAL replay"),
                       ("after_checkpoint", "(b) after a checkpoint"),
                       ("empty", "empty data dir")):
        runs = res[key]
        cells = [_s(statistics.median(r["phases"][p] for r in runs)) for p in PHASES]
        rotations = statistics.median(r["wal_rotations"] for r in runs)
        rows.append(f"| {label} | {' | '.join(cells)} | {rotations:g} |")
    return rows


def memory_rows(res: dict, records: int) -> list[str]:
    labels = {"empty": "(i) empty node",
              "loaded": "(ii) after loading, WAL-indexed (no checkpoint yet)",
              "replayed": "(ii′) after a full-WAL-replay restart",
              "absorbed": "(iii) after the checkpoint was absorbed (that node replayed the "
                          "WAL at start)",
              "restarted": "(iv) after a restart from the snapshot"}
    base, rows = res["memory"]["empty"], []
    for key, label in labels.items():
        mem = res["memory"].get(key)
        if mem is None:
            continue
        per = ["" if key == "empty" else f"{(mem[f] - base[f]) / records:.1f}"
               for f in ("rss", "uss", "anon")]
        rows.append(f"| {label} | {_mib(mem['rss'])} | {_mib(mem['uss'])} | "
                    f"{_mib(mem['anon'])} | {_mib(mem['file'])} | {' | '.join(per)} |")
    return rows


def render(args, meta: dict, res: dict) -> str:
    ck = res["checkpoint"]
    disk = ", ".join(f"{k}/ {_mib(v)}" for k, v in res["disk_loaded"].items())
    disk2 = ", ".join(f"{k}/ {_mib(v)}" for k, v in res["disk_checkpointed"].items())
    lines = [
        "## Recovery and memory", "", f"`{meta['argv']}`", "",
        f"engine commit {meta['engine_commit']}; {args.records:,} records of "
        f"{args.record_bytes} B over {args.topics} disk-class topics, {args.shards} shard(s), "
        f"{args.runs} restarts per case; Python {meta['python']}, {meta['cpus']} CPUs; "
        f"load average {meta['load_before']} before, {meta['load_after']} after; "
        f"elapsed {meta['elapsed_s']:.0f} s",
        "",
        f"Loading: {res['load']['records_per_s'] / 1e3:.0f} K records/s "
        f"({res['load']['seconds']:.1f} s; {args.batch} records per append). "
        f"Data dir after loading: {disk}; after the checkpoint: {disk2}. "
        f"Checkpoint: snapshot {ck['snapshot_id']}, covered after {ck['wait_s']:.1f} s "
        f"(checkpoint runs took {', '.join(f'{s:.1f}' for s in ck['checkpoint_s'])} s), "
        f"WAL tail left per shard: {', '.join(str(t) for t in ck['tail_bytes'])} bytes.",
        "",
        "| case | spawn → node_ready, median (min–max) | slowest shard's replay_s | "
        "frames replayed (all shards) | frames/s (all ÷ slowest replay_s) | "
        "ready minus replay_s | other cores |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *time_rows(res),
        "",
        "Where the time went (medians; from the node log's ms stamps, slowest shard):",
        "",
        "| case | spawn → supervisor listening | → shard serve() begins (spawn, imports) | "
        "→ `event=replayed` (snapshot + WAL scan) | → `event=ready` (writer open, holes) | "
        "→ status says node_ready | `wal_rotated` events |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *phase_rows(res),
        "",
        "| shard processes (summed) | RSS | USS | anon RSS | file RSS | "
        "RSS B/record | USS B/record | anon B/record |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *memory_rows(res, args.records),
    ]
    return "\n".join(lines) + "\n"


# --- entry ----------------------------------------------------------------------------------

def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)   # unwinds the finally that kills the node


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, _exit_on_signal)
    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="topics-recovery-", dir="/tmp")
    node = RecoveryNode(root, args.shards)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    began = time.monotonic()
    try:
        res = run(args, node)
    finally:
        node.kill()
        if args.keep:
            log.info("data dir and node logs kept in %s", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    meta = {"engine_commit": engine_commit(), "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "argv": "python " + " ".join(sys.argv),
            "load_before": load_before,
            "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "elapsed_s": time.monotonic() - began, "args": vars(args)}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"meta": meta, "results": res}, handle, indent=1, default=str)
    print(render(args, meta, res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
