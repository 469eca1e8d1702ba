"""The replies a connection of the asyncio transport waits for: one future per request, by
correlation id, that a reply resolves or its deadline ends with None. Deadlines are swept
every EXPIRY_TICK_S while requests wait, instead of a timer per request. Shared by the
ZeroMQ connection (async_connection.py) and the lane (lane_connection.py).
"""

from __future__ import annotations

import asyncio

from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply

EXPIRY_TICK_S = 0.05    # how often a busy connection looks for requests past their timeout


def _end(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class ReplyWaits:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.pending: dict[int, asyncio.Future] = {}
        self.deadlines: dict[int, float] = {}     # corr -> loop time its wait ends
        self._sweep: asyncio.TimerHandle | None = None

    def expect(self, corr: int, timeout_s: float) -> asyncio.Future:
        """The future of request `corr`'s reply: None once `timeout_s` has passed (within
        EXPIRY_TICK_S after)."""
        future = self.pending[corr] = self.loop.create_future()
        self.deadlines[corr] = self.loop.time() + timeout_s
        if self._sweep is None:
            self._sweep = self.loop.call_later(EXPIRY_TICK_S, self._expire)
        return future

    def forget(self, corr: int) -> None:
        self.pending.pop(corr, None)
        self.deadlines.pop(corr, None)

    def end(self, corr: int) -> None:
        """Request `corr` will get no reply (it could not be sent after all)."""
        future = self.pending.get(corr)
        if future is not None:
            _end(future)

    def end_all(self) -> None:
        for future in self.pending.values():
            _end(future)

    def resolve(self, raw: bytes) -> None:
        """A reply (or an error reply) in: the waiting request's future takes it."""
        try:
            corr, body = decode_reply(raw)
        except TopicsError as error:
            future = self.pending.get(getattr(error, "corr", -1))
            if future is not None and not future.done():
                future.set_exception(error)
            return
        future = self.pending.get(corr)
        if future is not None and not future.done():
            future.set_result(body)

    def _expire(self) -> None:
        now = self.loop.time()
        for corr in [c for c, deadline in self.deadlines.items() if deadline <= now]:
            _end(self.pending[corr])
        self._sweep = (self.loop.call_later(EXPIRY_TICK_S, self._expire) if self.deadlines
                       else None)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
