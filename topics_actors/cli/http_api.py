"""A small blocking client of the /v0 HTTP API for the `topics` verbs: one keep-alive
connection, JSON in and out, the error envelope turned into ApiError. It speaks only what
curl would, so the verbs work against the original server as well as this one.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse

from topics_actors.cli.exit_code import ExitCode

TIMEOUT_S = 30.0
LONG_POLL_MARGIN_S = 5.0   # on top of a request's own wait_ms


class ApiError(Exception):
    """A request that failed: the server's error envelope, or no server at all."""

    def __init__(self, message: str, status: int = 0, code: str = "", detail=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.detail = detail

    @property
    def exit_code(self) -> ExitCode:
        if self.status == 0:
            return ExitCode.UNREACHABLE
        if self.status == 404:
            return ExitCode.NOT_FOUND
        if self.status in (401, 403):
            return ExitCode.FORBIDDEN
        return ExitCode.API_ERROR


def _connection(url: urllib.parse.SplitResult, timeout_s: float):
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    return kind(url.hostname or "127.0.0.1", url.port, timeout=timeout_s)


class HttpApi:
    """`request()` answers the decoded JSON of a 2xx or raises ApiError."""

    def __init__(self, url: str, key: str | None = None, timeout_s: float = TIMEOUT_S):
        self.url = url.rstrip("/")
        self.parts = urllib.parse.urlsplit(self.url)
        if self.parts.scheme not in ("http", "https") or not self.parts.hostname:
            raise ApiError(f"--url must look like http://host:port, got {url!r}")
        self.key = key or None
        self.timeout_s = timeout_s
        self._conn = None

    def headers(self, extra: dict | None = None) -> dict:
        out = {"Accept": "application/json"}
        if self.key:
            out["Authorization"] = f"Bearer {self.key}"
        out.update(extra or {})
        return out

    def path(self, *segments: str, query: dict | None = None) -> str:
        """`/v0/...` from segments, each percent-encoded, and a query without None values."""
        text = self.parts.path.rstrip("/") + "/" + "/".join(
            urllib.parse.quote(s, safe="") for s in segments)
        kept = {k: v for k, v in (query or {}).items() if v is not None}
        return text + ("?" + urllib.parse.urlencode(kept) if kept else "")

    def request(self, method: str, path: str, body=None, timeout_s: float | None = None):
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = self.headers({"Content-Type": "application/json"} if data else None)
        for attempt in (1, 2):   # a keep-alive connection the server closed: once more
            conn = self._connection(timeout_s)
            try:
                conn.request(method, path, body=data, headers=headers)
                reply = conn.getresponse()
                payload = reply.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError,
                    ConnectionResetError) as error:
                self.close()
                if attempt == 2:
                    raise ApiError(f"{self.url}: {error}") from None
            except (OSError, http.client.HTTPException) as error:
                self.close()
                raise ApiError(f"cannot reach {self.url}: {error}") from None
        if reply.getheader("Connection", "").lower() == "close":
            self.close()
        return decode_reply(reply.status, payload, reply.getheader("Content-Type", ""))

    def text(self, path: str) -> str:
        """A GET whose answer is text (the Prometheus metrics)."""
        conn = self._connection(None)
        try:
            conn.request("GET", path, headers=self.headers({"Accept": "text/plain"}))
            reply = conn.getresponse()
            payload = reply.read()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise ApiError(f"cannot reach {self.url}: {error}") from None
        if reply.status >= 300:
            decode_reply(reply.status, payload, reply.getheader("Content-Type", ""))
        return payload.decode("utf-8", "replace")

    def stream(self, path: str, headers: dict | None = None, timeout_s: float = 60.0):
        """An open GET on a connection of its own (an SSE stream), or ApiError. The caller
        reads lines from the returned response and closes it."""
        conn = _connection(self.parts, timeout_s)
        try:
            conn.request("GET", path, headers=self.headers(
                {"Accept": "text/event-stream", **(headers or {})}))
            reply = conn.getresponse()
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            raise ApiError(f"cannot reach {self.url}: {error}") from None
        if reply.status >= 300:
            payload = reply.read()
            conn.close()
            decode_reply(reply.status, payload, reply.getheader("Content-Type", ""))
        return reply

    def _connection(self, timeout_s: float | None):
        if self._conn is None:
            self._conn = _connection(self.parts, self.timeout_s)
        self._conn.timeout = timeout_s or self.timeout_s
        if self._conn.sock is not None:
            self._conn.sock.settimeout(self._conn.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def decode_reply(status: int, payload: bytes, content_type: str):
    """The JSON of a 2xx answer; ApiError with the envelope's code for anything else."""
    try:
        doc = json.loads(payload) if payload else {}
    except ValueError:
        doc = None
    if 200 <= status < 300:
        if doc is None:
            raise ApiError(f"the server answered {status} with a body that is not JSON "
                           f"({content_type or 'no content type'})", status)
        return doc
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        raise ApiError(f"{error.get('code', 'error')}: {error.get('message', '')}".rstrip(": "),
                       status, str(error.get("code", "")), error.get("detail"))
    text = payload[:200].decode("utf-8", "replace").strip()
    raise ApiError(f"HTTP {status}" + (f": {text}" if text else ""), status)


def is_timeout(error: BaseException) -> bool:
    return isinstance(error, (socket.timeout, TimeoutError))
