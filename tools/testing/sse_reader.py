"""A small server-sent-events client for tests: GET a path over a raw socket, then read
events one at a time, each with a timeout (the SSE routes of the HTTP API)."""

from __future__ import annotations

import json
import socket
import time
from typing import NamedTuple


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

    def until(self, stopped, poll_s: float = 0.5):
        """Events (comments included) until the server ends the stream, the connection
        breaks (a server killed under it) or `stopped()` is true between polls."""
        while not stopped():
            try:
                event = self.next(poll_s)
            except TimeoutError:
                continue
            except OSError:
                return
            if event is None:
                return
            yield event

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
