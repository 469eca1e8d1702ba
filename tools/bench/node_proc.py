"""Run a `topics serve` node for a benchmark: own process group, temp data dir, free ports.

The node is always torn down by process group (SIGTERM, a grace period, then SIGKILL), and
its temp dir removed, whatever happened in between.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from topics_actors.client import Client, TopicsError
from topics_actors.topic_identity import shard_of_name

log = logging.getLogger(__name__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

START_DEADLINE_S = 60.0
STOP_GRACE_S = 5.0
POLL_S = 0.05


def wait_port_file(path: str, deadline: float, check_alive, poll_s: float) -> dict:
    """The ports a starting node wrote to `path`; check_alive() raises if it died."""
    while time.monotonic() < deadline:
        check_alive()
        try:
            with open(path, "rb") as handle:
                return json.loads(handle.read())
        except (FileNotFoundError, ValueError):
            time.sleep(poll_s)
    raise TimeoutError(f"no port file {path} by the deadline")


class NodeProcess:
    """A node started with `start()` and stopped with `stop()` (also as a context manager)."""

    def __init__(self, shards: int, base_dir: str | None = None, env: dict | None = None):
        """`env`: extra settings for the node (TOPICS_ZK, TOPICS_NODE_ID for a cluster)."""
        self.shards = shards
        self.extra_env = dict(env or {})
        self.base_dir = base_dir or tempfile.gettempdir()
        self.tmp = ""
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self.ports: dict = {}          # {"http": port, "zmq": port} once started
        self.client: Client | None = None
        self._log_handle = None

    def __enter__(self) -> "NodeProcess":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
        env.update(TOPICS_DATA_DIR=os.path.join(self.tmp, "data"), TOPICS_ZMQ_PORT="0",
                   TOPICS_PORT="0", TOPICS_PORT_FILE=os.path.join(self.tmp, "ports.json"),
                   TOPICS_WAL_SHARDS=str(self.shards),
                   TOPICS_STOP_GRACE_MS=str(int(STOP_GRACE_S * 1000 / 2)))
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="topics-bench-", dir=self.base_dir)
        self._log_handle = open(os.path.join(self.tmp, "node.log"), "wb")
        # `python -m supervisor.cli` from this checkout, not the `topics` script: the script
        # runs whichever checkout is installed (and a stale install has no supervisor).
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "serve"],
                                     env=self._env(), cwd=REPO_ROOT,
                                     stdin=subprocess.DEVNULL, stdout=self._log_handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_DEADLINE_S
        self.ports = ports = self._wait_port_file(deadline)
        self.endpoint = f"tcp://127.0.0.1:{ports['zmq']}"
        self.client = Client(self.endpoint, request_timeout_ms=2_000, retry_deadline_ms=10_000)
        self._wait_ready(deadline)
        log.info("node ready: endpoint=%s shards=%d pid=%d dir=%s", self.endpoint,
                 self.shards, self.proc.pid, self.tmp)

    def _check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"topics serve exited with {self.proc.returncode}; "
                               f"see {self.tmp}/node.log")

    def _wait_port_file(self, deadline: float) -> dict:
        return wait_port_file(os.path.join(self.tmp, "ports.json"), deadline,
                              self._check_alive, POLL_S)

    def _wait_ready(self, deadline: float) -> dict:
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                status = self.client.status()
            except TopicsError:
                status = {}
            if status.get("node_ready"):
                return status
            time.sleep(POLL_S)
        raise TimeoutError(f"node not ready after {START_DEADLINE_S:.0f} s")

    def stop(self) -> None:
        """Stop the whole process group and remove the temp dir; safe to call twice."""
        if self.tmp:
            for line in self.log_problems():
                log.warning("node log: %s", line)
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.proc is not None:
            began = time.monotonic()
            stop_group(self.proc)
            log.info("node pid %d stopped (exit %s) in %.1f s", self.proc.pid,
                     self.proc.returncode, time.monotonic() - began)
            self.proc = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = ""

    # --- what the benchmark asks of the node ----------------------------------------------

    def topic_names(self, prefix: str) -> list[str]:
        """One topic name per shard, so a load spread over them reaches every shard."""
        names: dict[int, str] = {}
        for i in range(100_000):
            name = f"{prefix}-{i}"
            names.setdefault(shard_of_name(name, self.shards), name)
            if len(names) == self.shards:
                break
        return [names[s] for s in sorted(names)]

    def snapshot(self) -> dict:
        """Per-shard statistics summed, shard incarnations, and CPU seconds of the shard
        processes and of the whole machine."""
        totals: dict[str, int] = {}
        for status in self.client.shard_statuses():
            for key, value in status["statistics"].items():
                totals[key] = totals.get(key, 0) + value
        shards = self.client.status()["shards"]
        cpu = 0.0
        for shard in shards:
            try:
                times = psutil.Process(shard["pid"]).cpu_times()
                cpu += times.user + times.system
            except (psutil.Error, TypeError, ValueError):
                pass
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        return {"stats": totals, "cpu_s": cpu, "machine_busy_s": busy, "t": time.monotonic(),
                "incarnations": sum(s["incarnation"] for s in shards)}

    def log_problems(self, limit: int = 30) -> list[str]:
        """WARNING/ERROR lines of the node's log (restarts, kills, failed batches)."""
        try:
            with open(os.path.join(self.tmp, "node.log"), "rb") as handle:
                lines = handle.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if " WARNING " in line or " ERROR " in line][:limit]


def stop_group(proc: subprocess.Popen) -> None:
    pgid = proc.pid   # start_new_session=True: the node leads its own process group
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        log.warning("node did not stop within %.0f s; killing its group", STOP_GRACE_S)
    _signal_group(pgid, signal.SIGKILL)   # whatever is left of the group (shards, helpers)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        log.error("node pid %d survived SIGKILL", proc.pid)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def kill_group(proc: subprocess.Popen, timeout_s: float = STOP_GRACE_S) -> None:
    """SIGKILL a node's whole process group at once, as a crash would (no SIGTERM, so no
    clean stop and no final checkpoint), and wait until every member is gone: a restart on
    the same data dir must not meet a dying shard still holding its files."""
    try:
        members = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        members = []
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.error("node pid %d survived SIGKILL", proc.pid)
    _, alive = psutil.wait_procs(members, timeout=timeout_s)
    for member in alive:
        log.error("node child pid %d survived SIGKILL", member.pid)


def _proc_status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def process_memory(pids: list[int]) -> dict:
    """RSS, USS, anonymous RSS (the heap: no file-backed or shmem pages) and file-backed
    RSS (mmapped files, shared libraries) summed over processes, in bytes (Linux)."""
    out = {"rss": 0, "uss": 0, "anon": 0, "file": 0}
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        out["rss"] += info.rss
        out["uss"] += info.uss
        out["anon"] += _proc_status_kb(pid, "RssAnon") * 1024
        out["file"] += _proc_status_kb(pid, "RssFile") * 1024
    return out


def machine_busy_s() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def group_cpu_s(pid: int) -> float:
    """CPU seconds used so far by a process and all its descendants."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
    except psutil.Error:
        pass
    return total
