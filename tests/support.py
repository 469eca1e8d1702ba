"""Shared test support: condition waits and a real node run as a subprocess.

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
              timeout_s: float = 10) -> HttpReply:
    """One request to 127.0.0.1:port. A dict or list body is sent as JSON (with a JSON
    Content-Type unless `headers` names one); bytes are sent as they are."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
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
                 log_path: str | None = None):
        self.data_dir = data_dir
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
        self.proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "serve"], env=env,
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
        return http_call(self.http_port, method, path, body, headers, timeout_s)

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.ports['zmq']}"

    def client(self, **options) -> Client:
        options.setdefault("request_timeout_ms", 2000)
        client = Client(self.endpoint, **options)
        self._clients.append(client)
        return client

    def status(self) -> dict:
        with Client(self.endpoint, request_timeout_ms=2000, retry_deadline_ms=2000) as client:
            return client.status()

    def wait_ready(self, timeout_s: float = 30) -> dict:
        def ready():
            try:
                status = self.status()
            except Exception:
                return None
            return status if status["node_ready"] else None
        return wait_for(ready, timeout_s, "node readiness")

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


class SseEvent(NamedTuple):
    event: str | None       # None for a comment (heartbeat) or a bare `retry:`
    id: str | None
    data: str | None
    comment: str | None = None
    retry: int | None = None

    def json(self):
        return json.loads(self.data)


class SseReader:
    """A small server-sent-events client over a raw socket: GET `path`, then read events
    one at a time, each with a timeout. `status`/`headers` are the response's; a non-200
    response's `body` is read whole."""

    def __init__(self, port: int, path: str, headers: dict | None = None,
                 timeout_s: float = 10):
        import socket
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        self.chunked = False
        self.done = False
        head = self._until(b"\r\n\r\n", timeout_s).decode("latin-1").split("\r\n")
        self.status = int(head[0].split()[1])
        self.headers = {k.lower(): v.strip() for k, _, v in
                        (line.partition(":") for line in head[1:] if line)}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.text = b""          # de-chunked body bytes not yet parsed into events
        self.body = b""
        if self.status != 200:
            self.body = self._rest(timeout_s)

    def _recv(self, deadline: float) -> bool:
        import socket
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no SSE data in time")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError("no SSE data in time") from None
        if not data:
            self.done = True
            return False
        self.buf += data
        return True

    def _until(self, mark: bytes, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        while mark not in self.buf:
            if not self._recv(deadline):
                raise EOFError("connection closed")
        out, _, self.buf = self.buf.partition(mark)
        return out

    def _rest(self, timeout_s: float) -> bytes:
        length = int(self.headers.get("content-length", "-1"))
        deadline = time.monotonic() + timeout_s
        while (length < 0 or len(self.buf) < length) and not self.done:
            self._recv(deadline)
        return self.buf

    def _fill(self, deadline: float) -> bool:
        """Move more de-chunked bytes into self.text; False at the end of the body."""
        if not self.chunked:
            if self.buf:
                self.text, self.buf = self.text + self.buf, b""
                return True
            return self._recv(deadline) or bool(self.buf)
        while b"\r\n" not in self.buf:
            if not self._recv(deadline):
                return False
        size_line, _, rest = self.buf.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            self.done = True
            return False
        while len(rest) < size + 2:
            before = len(self.buf)
            if not self._recv(deadline):
                return False
            rest += self.buf[before:]
        self.text += rest[:size]
        self.buf = rest[size + 2:]
        return True

    def next(self, timeout_s: float = 10) -> SseEvent | None:
        """The next event (or comment); None when the server ended the stream."""
        deadline = time.monotonic() + timeout_s
        while b"\n\n" not in self.text:
            if not self._fill(deadline):
                return None
        block, _, self.text = self.text.partition(b"\n\n")
        fields: dict = {}
        for line in block.decode().split("\n"):
            name, _, value = line.partition(":")
            fields.setdefault(name or "comment", value[1:] if value.startswith(" ") else value)
        retry = fields.get("retry")
        return SseEvent(fields.get("event"), fields.get("id"), fields.get("data"),
                        fields.get("comment"), int(retry) if retry is not None else None)

    def events(self, count: int, timeout_s: float = 10, skip_comments: bool = True) -> list:
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count:
            event = self.next(max(0.01, deadline - time.monotonic()))
            if event is None:
                raise EOFError(f"the stream ended after {out}")
            if skip_comments and event.event is None:
                continue
            out.append(event)
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "SseReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
