"""The asyncio client's connection: its own reader on ZeroMQ's edge-triggered descriptor
takes every reply (several frames in one message, a reply that lands while a send runs),
waits for a peer that comes up late, and gives up on one that never does; the requests of
one pass of the loop leave as one message (the first at once)."""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq

from topics_actors.client.async_connection import AsyncConnection
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol import decode, encode, encode_error, encode_reply
from topics_actors.protocol.messages import Status

pytestmark = pytest.mark.timeout(30)


_peers: list[zmq.Socket] = []


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    while _peers:
        _peers.pop().close(0)
    context.term()


def _router(ctx: zmq.Context, endpoint: str | None = None) -> tuple[zmq.Socket, str]:
    """A peer socket of the test's (closed by the ctx fixture)."""
    sock = ctx.socket(zmq.ROUTER)
    _peers.append(sock)
    sock.setsockopt(zmq.LINGER, 0)
    if endpoint is None:
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        return sock, f"tcp://127.0.0.1:{port}"
    sock.bind(endpoint)
    return sock, endpoint


async def _take(router: zmq.Socket, count: int) -> tuple[bytes, list[int]]:
    """The peer identity and the corrs of the next `count` requests, without blocking
    the loop (the connection's reader runs meanwhile)."""
    corrs, peer = [], b""
    while len(corrs) < count:
        try:
            peer, *raws = router.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            await asyncio.sleep(0.001)
            continue
        corrs += [decode(raw)[0] for raw in raws]
    return peer, corrs


def test_replies_in_one_message_resolve_their_own_requests(ctx):
    router, endpoint = _router(ctx)

    async def main():
        conn = AsyncConnection(ctx, endpoint, 8)
        try:
            futures = [conn.expect(corr, 5.0) for corr in (1, 2, 3)]
            for corr in (1, 2, 3):
                assert await conn.send_when_connected(encode(Status(), corr), corr, 5_000)
            peer, corrs = await _take(router, 3)
            assert corrs == [1, 2, 3]
            # The shard answers a commit's requests in one message, in any order.
            router.send_multipart([peer, encode_reply(3, {"n": 3}),
                                   encode_error(1, TopicsError("gone", ErrorCode.NOT_FOUND)),
                                   encode_reply(2, {"n": 2})])
            assert await asyncio.wait_for(futures[2], 5) == {"n": 3}
            assert await asyncio.wait_for(futures[1], 5) == {"n": 2}
            with pytest.raises(TopicsError, match="gone"):
                await asyncio.wait_for(futures[0], 5)
        finally:
            conn.close()
    asyncio.run(main())


def test_a_reply_that_lands_during_a_send_is_still_read(ctx):
    """A send can take the descriptor's signal of a reply that came meanwhile; the drain
    the send asks for reads it anyway. Many rounds, each sending while a reply is due."""
    router, endpoint = _router(ctx)

    async def main():
        conn = AsyncConnection(ctx, endpoint, 64)
        try:
            assert await conn.send_when_connected(encode(Status(), 1), 1, 5_000)
            waiting = conn.expect(1, 5.0)
            for corr in range(2, 302):
                peer, (prev,) = await _take(router, 1)
                router.send_multipart([peer, encode_reply(prev, {"corr": prev})])
                nxt = conn.expect(corr, 5.0)
                assert conn.send(encode(Status(), corr), corr)
                assert (await asyncio.wait_for(waiting, 5))["corr"] == prev
                waiting = nxt
        finally:
            conn.close()
    asyncio.run(main())


def _messages(router: zmq.Socket, count: int) -> list[list[int]]:
    """The corrs of each message the router receives until `count` requests are in (or
    none comes for 5 s)."""
    out = []
    while sum(map(len, out)) < count and router.poll(5_000):
        _peer, *raws = router.recv_multipart()
        out.append([decode(raw)[0] for raw in raws])
    return out


def test_the_sends_of_one_pass_leave_as_one_message(ctx):
    router, endpoint = _router(ctx)

    async def main():
        conn = AsyncConnection(ctx, endpoint, 8)
        try:
            assert await conn.send_when_connected(encode(Status(), 0), 0, 5_000)
            await asyncio.sleep(0)              # its pass ends
            assert _messages(router, 1) == [[0]]
            for corr in (1, 2, 3, 4, 5):
                conn.expect(corr, 5.0)
                assert conn.send(encode(Status(), corr), corr)
            await asyncio.sleep(0)              # the pass ends: the rest go
            assert _messages(router, 5) == [[1], [2, 3, 4, 5]]
        finally:
            conn.close()
    asyncio.run(main())


class _Gone:
    """A socket whose peer went between a pass's first send and its end: the rest cannot
    be handed over (what IMMEDIATE answers then)."""

    def __init__(self, sock: zmq.Socket):
        self.sock, self.closed = sock, False

    def send_multipart(self, frames, flags=0):
        raise zmq.Again()

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_requests_a_pass_could_not_send_end_their_waits_at_once(ctx):
    """Their waits end with no reply, at once, and the client retries them."""
    router, endpoint = _router(ctx)

    async def main():
        conn = AsyncConnection(ctx, endpoint, 8)
        try:
            first = conn.expect(1, 30.0)
            assert await conn.send_when_connected(encode(Status(), 1), 1, 5_000)
            later = conn.expect(2, 30.0)
            assert conn.send(encode(Status(), 2), 2)
            real, conn.sock = conn.sock, _Gone(conn.sock)
            assert await asyncio.wait_for(later, 5) is None
            conn.sock = real
            assert not first.done()
        finally:
            conn.close()
    asyncio.run(main())


def test_a_send_waits_for_a_peer_that_binds_late(ctx, tmp_path):
    endpoint = f"ipc://{tmp_path}/late.sock"

    async def main():
        conn = AsyncConnection(ctx, endpoint, 8)
        try:
            assert not conn.send(encode(Status(), 1), 1)   # IMMEDIATE: nobody to take it
            sending = asyncio.ensure_future(conn.send_when_connected(encode(Status(), 1), 1,
                                                                     10_000))
            await asyncio.sleep(0.2)
            assert not sending.done()
            router, _ = _router(ctx, endpoint)
            assert await asyncio.wait_for(sending, 10)
            _, corrs = await _take(router, 1)
            assert corrs == [1]
        finally:
            conn.close()
    asyncio.run(main())


def test_a_send_gives_up_when_no_peer_comes(ctx, tmp_path):
    async def main():
        conn = AsyncConnection(ctx, f"ipc://{tmp_path}/nobody.sock", 8)
        try:
            t0 = time.monotonic()
            assert not await conn.send_when_connected(encode(Status(), 1), 1, 300)
            assert 0.25 <= time.monotonic() - t0 < 3.0
        finally:
            conn.close()
    asyncio.run(main())


def test_close_takes_the_reader_off_the_loop(ctx):
    _, endpoint = _router(ctx)

    async def main():
        conn = AsyncConnection(ctx, endpoint, 8)
        fd = conn.sock.getsockopt(zmq.FD)
        conn.close()
        assert conn.sock.closed
        assert not asyncio.get_running_loop().remove_reader(fd)
    asyncio.run(main())
