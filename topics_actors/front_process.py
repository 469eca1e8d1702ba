"""The serve function of the node processes that reach the shards through the front (the
compactor and the reclaimer): a hello to the supervisor, a Client with short timeouts, and
their server. Kept out of child_process, which every process starts with, so the shards
and the gateway do not import the client library they never use.
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from topics_actors.client.sync_client import Client
from topics_actors.supervisor_link import SupervisorLink, stop_on_signals

FRONT_TIMEOUT_MS = 2_000   # a process that heartbeats between front calls must not block long


def serve_through_front(front: str, ctx: zmq.Context, link: SupervisorLink | None,
                        make_server: Callable) -> None:
    """Run a node process that reaches the shards through the front (compactor, reclaimer):
    hello, a Client with short timeouts, the server from make_server(client, link)."""
    if link:
        link.hello("", "")
    client = Client(front, request_timeout_ms=FRONT_TIMEOUT_MS,
                    retry_deadline_ms=FRONT_TIMEOUT_MS, ctx=ctx, node_local=True)
    try:
        server = make_server(client, link)
        stop_on_signals(server)
        server.serve()
    finally:
        client.close()
