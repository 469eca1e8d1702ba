"""The blocking client's `watch`: AsyncClient.watch driven on a private event loop, one
event per step, so a plain `for` loop reads the same events (topics_actors/client/
topic_watch.py). Between steps nothing needs the loop: replies wait in ZeroMQ's queues."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from topics_actors.client.async_client import AsyncClient


def blocking_watch(endpoint: str, request_timeout_ms: int, retry_deadline_ms: int, topics,
                   options: dict) -> Iterator[dict]:
    loop = asyncio.new_event_loop()
    client = AsyncClient(endpoint, request_timeout_ms=request_timeout_ms,
                         retry_deadline_ms=retry_deadline_ms)
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
