"""The blocking client's `watch`: AsyncClient.watch driven on a private event loop, one
event per step, so a plain `for` loop reads the same events (topics_actors/client/
topic_watch.py). Between steps nothing needs the loop: replies wait in ZeroMQ's queues."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from topics_actors.client.async_client import AsyncClient


def blocking_watch(endpoint: str, client_options: dict, topics,
                   options: dict) -> Iterator[dict]:
    """`client_options`: the AsyncClient's keyword arguments (the blocking client's own)."""
    loop = asyncio.new_event_loop()
    client = AsyncClient(endpoint, **client_options)
    events = client.watch(topics, **options)
    try:
        while True:
            try:
                yield loop.run_until_complete(events.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(events.aclose())
        loop.run_until_complete(client.close())
        loop.close()
