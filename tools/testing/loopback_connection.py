"""A stand-in for a connection of the asyncio client (client/async_transport.py) that hands
each request's encoded bytes to a function in the same process and resolves the reply it
returns on the loop's next pass: the client's own path without sockets
(tools/bench/client_overhead.py, tools/append_walk.py). Self-contained, so trees from
before and after a change to the client's connections can both be timed with it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from topics_actors.protocol import decode_reply


class LoopbackConnection:
    watch = None            # no handshake to watch
    closed = False

    def __init__(self, endpoint: str, answer: Callable[[bytes], list[bytes]]):
        """`answer(raw request)`: the raw replies (usually one) to it."""
        self.endpoint = endpoint
        self.answer = answer
        self.window = asyncio.Semaphore(256)
        self.loop = asyncio.get_running_loop()
        self.pending: dict[int, asyncio.Future] = {}

    def expect(self, corr: int, timeout_s: float) -> asyncio.Future:
        future = self.pending[corr] = self.loop.create_future()
        return future

    def forget(self, corr: int) -> None:
        self.pending.pop(corr, None)

    def send(self, raw: bytes, corr: int | None = None) -> bool:
        for reply in self.answer(raw):
            self.loop.call_soon(self._resolve, reply)
        return True

    def _resolve(self, raw: bytes) -> None:
        corr, body = decode_reply(raw)
        future = self.pending.get(corr)
        if future is not None and not future.done():
            future.set_result(body)

    def close(self) -> None:
        pass
