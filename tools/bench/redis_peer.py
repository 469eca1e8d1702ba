"""Redis streams as the peer: a private redis-server with AOF, driven by redis-benchmark."""

from __future__ import annotations

import csv
import io
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

log = logging.getLogger(__name__)

START_DEADLINE_S = 20.0
STOP_GRACE_S = 5.0
APT_TIMEOUT_S = 600
VALUE = "v" * 100
CLIENTS = 50


def available() -> bool:
    return bool(shutil.which("redis-server") and shutil.which("redis-benchmark"))


def install() -> str:
    """`apt-get update` + `apt-get install -y redis-server`; returns '' or what went wrong."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        log.info("running: %s", " ".join(argv))
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True,
                                  timeout=APT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{' '.join(argv)}: {error}"
        if done.returncode != 0:
            return f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}"
    return "" if available() else "apt-get succeeded but redis-server/redis-benchmark missing"


def version() -> str:
    done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                          timeout=10)
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """redis-server with `appendonly yes --appendfsync <mode>`, RDB and AOF rewrite off."""

    def __init__(self, fsync_mode: str, base_dir: str | None = None,
                 extra_args: list[str] | None = None):
        """`extra_args`: more redis-server options (`--replicaof 127.0.0.1 <port>`)."""
        self.fsync_mode = fsync_mode
        self.extra_args = list(extra_args or [])
        self.base_dir = base_dir or tempfile.gettempdir()
        self.proc: subprocess.Popen | None = None
        self.tmp = ""
        self.port = 0

    def __enter__(self) -> "RedisServer":
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _argv(self) -> list[str]:
        return ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                "--dir", self.tmp, "--daemonize", "no", "--appendonly", "yes",
                "--appendfsync", self.fsync_mode, "--save", "",
                "--auto-aof-rewrite-percentage", "0", "--logfile", "redis.log",
                *self.extra_args]

    def _start(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="redis-bench-", dir=self.base_dir)
        self.port = free_port()
        self.proc = subprocess.Popen(self._argv(), cwd=self.tmp, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            if _ping(self.port):
                return
            time.sleep(0.05)
        raise TimeoutError("redis-server did not answer PING in time")

    def _stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_GRACE_S)
            self.proc = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = ""

    def benchmark(self, pipeline: int, requests: int, timeout_s: float) -> dict:
        argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(self.port), "-c", str(CLIENTS),
                "-P", str(pipeline), "-n", str(requests), "--csv",
                "XADD", "bench", "*", "d", VALUE]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise RuntimeError(f"redis-benchmark exited {done.returncode}: "
                               f"{done.stderr.strip()[-300:]}")
        return parse_csv(done.stdout)


def parse_csv(text: str) -> dict:
    """The last data row of `redis-benchmark --csv`: rps and p50/p99 in ms."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    header = rows[0]
    if "rps" not in header:
        raise ValueError(f"unexpected redis-benchmark output: {text[:200]!r}")
    row = dict(zip(header, rows[-1]))
    return {"ops_per_s": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"])}
