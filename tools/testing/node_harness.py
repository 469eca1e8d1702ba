"""A real node run as a subprocess, and condition waits (the tests and tools/crashtest).

A Node runs `topics serve` in its own session (process group) with its own data dir and
ephemeral ports; stopping it always kills the whole group, so no process outlives a test.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import psutil

from topics_actors.client import Client
from topics_actors.topic_identity import shard_of_name


LOG_TAIL_CHARS = 4000         # of a node's log, in the report of a node that never got ready


def wait_for(condition, timeout_s: float, what: str = "condition", interval_s: float = 0.02):
    """Poll `condition()` until it returns a truthy value; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class HttpReply(NamedTuple):
    status: int
    headers: dict           # lower-case names
    body: bytes

    def json(self):
        return json.loads(self.body)


def http_call(port: int, method: str, path: str, body=None, headers: dict | None = None,
              timeout_s: float = 10, host: str = "127.0.0.1") -> HttpReply:
    """One request to host:port (loopback by default). A dict or list body is sent as JSON
    (with a JSON Content-Type unless `headers` names one); bytes are sent as they are."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return HttpReply(response.status, {k.lower(): v for k, v in response.getheaders()},
                         response.read())
    finally:
        conn.close()


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


class Node:
    def __init__(self, data_dir: str, shards: int = 2, env: dict | None = None,
                 log_path: str | None = None, client_options: dict | None = None,
                 host: str = "127.0.0.1", argv_prefix: list[str] | None = None):
        """`client_options`: given to every Client the harness makes (CURVE keys). `host`:
        where the node serves (its TOPICS_HOST, set in `env`); `argv_prefix`: what runs the
        node's command (nsenter into a network namespace, tools/testing/net_lab.py)."""
        self.data_dir = data_dir
        self.host = host
        self.argv_prefix = list(argv_prefix or [])
        self.client_options = client_options or {}
        self.shards = shards
        self.extra_env = env or {}
        self.log_path = log_path or os.path.join(os.path.dirname(data_dir) or ".",
                                                 f"node-{os.path.basename(data_dir)}.log")
        self.proc: subprocess.Popen | None = None
        self.ports: dict = {}
        self._clients: list[Client] = []

    def start(self, wait_ready: bool = True, timeout_s: float = 30) -> "Node":
        port_file = os.path.join(os.path.dirname(self.log_path), f"ports-{os.getpid()}-{id(self)}")
        if os.path.exists(port_file):
            os.unlink(port_file)
        env = dict(os.environ, TOPICS_DATA_DIR=self.data_dir, TOPICS_PORT="0",
                   TOPICS_ZMQ_PORT="0", TOPICS_PORT_FILE=port_file,
                   TOPICS_WAL_SHARDS=str(self.shards))
        env.update(self.extra_env)        # may fix a port (a restart on the same front)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([*self.argv_prefix, sys.executable, "-m", "supervisor.cli",
                                      "serve"], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_for(lambda: os.path.exists(port_file) or self.proc.poll() is not None,
                 timeout_s, "the port file")
        if self.proc.poll() is not None:
            raise AssertionError(f"node exited with {self.proc.returncode}: {self.log()}")
        with open(port_file) as handle:
            self.ports = json.load(handle)
        if wait_ready:
            self.wait_ready(timeout_s)
        return self

    @property
    def http_port(self) -> int:
        return self.ports["http"]

    def http(self, method: str, path: str, body=None, headers: dict | None = None,
             timeout_s: float = 10) -> HttpReply:
        return http_call(self.http_port, method, path, body, headers, timeout_s, self.host)

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.ports['zmq']}"

    def client(self, **options) -> Client:
        options.setdefault("request_timeout_ms", 2000)
        client = Client(self.endpoint, **{**self.client_options, **options})
        self._clients.append(client)
        return client

    def status(self) -> dict:
        with Client(self.endpoint, request_timeout_ms=2000, retry_deadline_ms=2000,
                    **self.client_options) as client:
            return client.status()

    def wait_ready(self, timeout_s: float = 30) -> dict:
        """The node's status once it says node_ready. On a timeout the failure carries the
        last status (or error) seen and the end of the node's log, so that a node that
        never got ready can be diagnosed from the test report alone."""
        seen = {}

        def ready():
            try:
                status = self.status()
            except Exception as error:  # noqa: BLE001 - not up yet; kept for the report
                seen["last"] = repr(error)
                return None
            seen["last"] = status
            return status if status["node_ready"] else None
        try:
            return wait_for(ready, timeout_s, "node readiness")
        except AssertionError as error:
            tail = self.log()[-LOG_TAIL_CHARS:]
            raise AssertionError(f"{error}; last status: {seen.get('last')}\n"
                                 f"end of {self.log_path}:\n{tail}") from None

    def shard_pid(self, shard: int) -> int:
        return self.status()["shards"][shard]["pid"]

    def process_pid(self, role: str) -> int:
        """The pid of the node's non-shard process `role` (compactor, ...); 0 if down."""
        return next(p["pid"] for p in self.status()["processes"] if p["role"] == role)

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def log(self) -> str:
        with open(self.log_path, "rb") as handle:
            return handle.read().decode(errors="replace")

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM the supervisor and wait; whatever is left of the group is killed."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill_group()
        return self.proc.returncode

    def kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.forget()

    def forget(self) -> None:
        """Reap a supervisor whose group is gone (nothing left to signal) and close its log."""
        self.proc.wait()
        self._log.close()

    def __enter__(self) -> "Node":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def names_on(shard: int, count: int, prefix: str = "t", shards: int = 2) -> list[str]:
    """`count` topic names that the shard `shard` of `shards` owns."""
    names, i = [], 0
    while len(names) < count:
        name = f"{prefix}{i}"
        if shard_of_name(name, shards) == shard:
            names.append(name)
        i += 1
    return names
