"""A client pointed where no node is fails fast and says so ("no node at ..."), instead of
retrying for its whole retry deadline and then blaming a shard; a client that reached its
node once still rides through the node's restarts (tests/fault)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import zmq

from topics_actors.client import AsyncClient, Client, TopicsError


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _expect_no_node(call, endpoint: str, within_s: float) -> None:
    t0 = time.monotonic()
    with pytest.raises(TopicsError, match=f"no node at {endpoint}") as excinfo:
        call()
    assert time.monotonic() - t0 < within_s
    assert excinfo.value.detail == {"endpoint": endpoint}


@pytest.mark.timeout(30)
def test_nothing_listening_fails_within_the_connect_timeout():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with Client(endpoint, connect_timeout_ms=300, retry_deadline_ms=30_000) as client:
        _expect_no_node(lambda: client.get_topic("t"), endpoint, within_s=2.0)
        _expect_no_node(client.shard_statuses, endpoint, within_s=2.0)

    async def main():
        async with AsyncClient(endpoint, connect_timeout_ms=300) as client:
            await client.get_topic("t")
    _expect_no_node(lambda: asyncio.run(main()), endpoint, within_s=2.0)


@pytest.mark.timeout(30)
def test_a_peer_that_never_answers_fails_within_the_request_timeout():
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{port}"
    try:
        with Client(endpoint, request_timeout_ms=400, retry_deadline_ms=30_000,
                    ctx=ctx) as client:
            _expect_no_node(lambda: client.put_topic("t"), endpoint, within_s=3.0)
    finally:
        silent.close(0)
        ctx.term()


@pytest.mark.timeout(30)
def test_an_async_request_nobody_answers_ends_at_its_timeout():
    """The AsyncClient's timeouts come from one sweep per connection (EXPIRY_TICK_S), not
    a timer per request: a request still ends about `request_timeout_ms` after it went."""
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    endpoint = f"tcp://127.0.0.1:{port}"

    async def main():
        async with AsyncClient(endpoint, request_timeout_ms=400) as client:
            await client.put_topic("t")
    try:
        t0 = time.monotonic()
        _expect_no_node(lambda: asyncio.run(main()), endpoint, within_s=3.0)
        assert time.monotonic() - t0 >= 0.4
    finally:
        silent.close(0)
        ctx.term()
