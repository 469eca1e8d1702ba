"""One client per process and endpoint, created lazily where it is used.

Readers, writers and partitions are pickled between Spark's processes, so none of them may
hold a socket (spec/spark.md 3.1, P5). A worker asks here instead; the client lives in a
module-level dict keyed by the process id too, so a forked child never uses its parent's
sockets, and it survives across the tasks a reused worker runs.
"""

from __future__ import annotations

import atexit
import os

from topics_actors.client import Client

_clients: dict[tuple[int, str, int], Client] = {}


def client_for(url: str, request_timeout_ms: int) -> Client:
    key = (os.getpid(), url, request_timeout_ms)
    client = _clients.get(key)
    if client is None:
        for stale in [k for k in _clients if k[0] != key[0]]:
            del _clients[stale]       # inherited over fork: never touch the parent's sockets
        client = _clients[key] = Client(url, request_timeout_ms=request_timeout_ms,
                                        retry_deadline_ms=max(request_timeout_ms, 30_000))
    return client


def close_all() -> None:
    pid = os.getpid()
    for key in [k for k in _clients if k[0] == pid]:
        _clients.pop(key).close()


atexit.register(close_all)
