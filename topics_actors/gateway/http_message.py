"""The gateway's own HTTP request and response records (handlers never see the server's),
and the JSON and error bodies every route answers with (spec/api.md 1)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes

import orjson

from topics_actors.errors import TopicsError

JSON = "application/json"
RETRY_AFTER_S = "1"


@dataclasses.dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    path: str                       # percent-decoded by the server
    query: str = ""                 # raw query string, without "?"
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)  # lower-case names
    body: bytes = b""

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


@dataclasses.dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()

    def header_list(self) -> list[tuple[str, str]]:
        return [("content-type", self.content_type), *self.headers]


class StreamSink(Protocol):
    """Where a stream's chunks go, for a chunk written outside the stream's own iteration
    (a watch stream taking a commit's page while it waits): `ready()` while the
    connection takes chunks now (open, not backed up), `push(chunk)` writes one."""

    def ready(self) -> bool: ...

    def push(self, chunk: bytes) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class HttpStream:
    """A streamed response (SSE): the server sends the status and headers at once, then
    every chunk as it comes; a client that goes away closes `chunks` (its `finally`
    blocks free what the stream holds). `attach`, when given, gets the connection's
    StreamSink while the stream runs, and None when it ends."""
    status: int
    chunks: AsyncIterator[bytes]
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()
    attach: Callable[[StreamSink | None], None] | None = None

    def header_list(self) -> list[tuple[str, str]]:
        return [("content-type", self.content_type), *self.headers]


def split_target(target: bytes) -> tuple[str, str]:
    """A request target as (path percent-decoded, raw query without "?"): origin form
    `/p?q`, or absolute form `http://host/p?q`. A bad UTF-8 sequence in the path is
    replaced; the query stays as sent (request_body decodes its parameters)."""
    if not target.startswith(b"/") and b"://" in target:
        rest = target.split(b"://", 1)[1]
        target = b"/" + rest.split(b"/", 1)[1] if b"/" in rest else b"/"
    path, _, query = target.partition(b"#")[0].partition(b"?")
    if b"%" in path:
        path = unquote_to_bytes(path)
    return path.decode("utf-8", "replace") or "/", query.decode("utf-8", "replace")


def elapsed_ms(t0_ns: int) -> float:
    """Milliseconds since `t0_ns` (perf_counter_ns): a reply's server_total_ms."""
    return (time.perf_counter_ns() - t0_ns) / 1e6


def with_performance(reply: dict, t0_ns: int) -> dict:
    """`reply` with server_total_ms written into its `performance` (the shard's figures
    kept)."""
    performance = dict(reply.get("performance") or {})
    performance["server_total_ms"] = elapsed_ms(t0_ns)
    reply["performance"] = performance
    return reply


def json_response(status: int, body: Any) -> HttpResponse:
    return HttpResponse(status, orjson.dumps(body))


def error_response(error: TopicsError) -> HttpResponse:
    """The error envelope {"error": {code, message, detail?}}; 429 and 503 say Retry-After,
    405 says which methods are allowed (Allow)."""
    headers = (("retry-after", RETRY_AFTER_S),) if error.status in (429, 503) else ()
    allow = getattr(error, "allow", None)
    if allow:
        headers += (("allow", allow),)
    return HttpResponse(error.status, orjson.dumps({"error": error.to_wire()}), JSON, headers)
