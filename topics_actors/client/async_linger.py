"""Linger in the AsyncClient (issue 18; the rules: append_linger.py).

An append joins the open batch of its topic and key; a batch opens with a timer of
linger_ms and is sent when the timer fires or when it is full, as a task of its own, so
several batches may be in flight at once (within the connection's max_in_flight window).
Adaptive (linger_ms "auto"): a batch that opens while its topic and key have room in flight
(fewer than in_flight_max requests out) is sent at the end of the loop's current turn
instead, so the appends made in that turn join it (the callers one reply woke re-append in
the same turn) and none waits for a timer; one that opens without room keeps its timer
(the bound) and goes at the end of the turn in which a request of its key is answered.
At most `waiting_max` appends are inside linger at a time (waiting or in flight); more
wait for room. A caller cancelled while its batch waits or flies does not take its records
out of the batch: they are sent, and the answer is dropped.

close() sends the open batches at once and waits for every batch's answer.
"""

from __future__ import annotations

import asyncio
import collections

from topics_actors.client.append_linger import (
    ClientStatistics, LingerOptions, OpenBatch, Pending, batch_key, own_error, pending_of,
    splits_on,
)
from topics_actors.client.linger_sender import closed_error
from topics_actors.errors import TopicsError


def _answer(pending: Pending, reply: dict | None, error: BaseException | None) -> None:
    future = pending.slot
    if future.done():            # its caller was cancelled
        return
    if error is not None:
        future.set_exception(own_error(error))
    else:
        future.set_result(reply)


class AsyncLinger:
    def __init__(self, client, limits: LingerOptions):
        """`client`: the AsyncClient whose `_request` sends the batches."""
        self._client = client
        self._limits = limits
        self._linger_s = limits.linger_ms / 1000
        self._open: dict[tuple, OpenBatch] = {}
        # Each open batch's send: its linger timer, or (adaptive) the end of the loop's turn.
        self._timers: dict[tuple, asyncio.Handle] = {}
        self._flying: collections.Counter = collections.Counter()   # requests out, per key
        self._sending: set[asyncio.Task] = set()
        self._room = asyncio.Semaphore(limits.waiting_max)
        self._closed = False
        self._appends = self._requests = self._splits = self._inside = self._at_once = 0

    async def append(self, topic: str, records: list, options: dict) -> dict:
        if self._closed:
            raise closed_error()
        key = batch_key(options)
        pending = pending_of(records, options, key, self._limits)   # its errors: raised here
        self._appends += 1
        if pending.alone:
            self._requests += 1
            batch = OpenBatch.of_one(topic, pending, None)
            return await self._client._request(topic,
                                               batch.message(self._client._session_key()))
        async with self._room:
            if self._closed:
                raise closed_error()
            pending.slot = asyncio.get_running_loop().create_future()
            self._inside += 1
            try:
                self._add((topic, key), pending)
                return await pending.slot
            finally:
                self._inside -= 1

    def _add(self, where: tuple, pending: Pending) -> None:
        batch = self._open.get(where)
        if batch is not None and not batch.fits(pending, self._limits):
            self._flush(where)
            batch = None
        if batch is None:
            batch = self._open[where] = OpenBatch(where[0], where[1][0])
            loop = asyncio.get_running_loop()
            if self._limits.goes_at_once(self._flying[where]):
                self._timers[where] = loop.call_soon(self._flush, where, True)
            else:
                self._timers[where] = loop.call_later(self._linger_s, self._flush, where)
        batch.add(pending)
        if batch.full(self._limits):
            self._flush(where)

    def _flush(self, where: tuple, at_once: bool = False) -> None:
        timer = self._timers.pop(where, None)
        if timer is not None:
            timer.cancel()
        batch = self._open.pop(where, None)
        if batch is not None:
            self._at_once += at_once
            self._flying[where] += 1
            task = asyncio.get_running_loop().create_task(self._fly(where, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _fly(self, where: tuple, batch: OpenBatch) -> None:
        """Send a batch; once it is answered, a batch of its key waiting for room goes."""
        try:
            await self._send(batch)
        finally:
            self._flying[where] -= 1
            if not self._flying[where]:
                del self._flying[where]
            self._room_came(where)

    def _room_came(self, where: tuple) -> None:
        """A batch of `where` that waits on its timer goes at the end of this turn, after
        the callers just answered have appended again (they run first: their wake-ups
        were queued when their answers were set)."""
        timer = self._timers.get(where)
        if (type(timer) is asyncio.TimerHandle
                and self._limits.goes_at_once(self._flying[where])):
            timer.cancel()
            self._timers[where] = asyncio.get_running_loop().call_soon(self._flush, where,
                                                                        True)

    async def _send(self, batch: OpenBatch) -> None:
        self._requests += 1
        try:
            reply = await self._client._request(batch.topic,
                                                batch.message(self._client._session_key()))
        except TopicsError as error:
            if splits_on(batch, error):
                self._splits += 1
                await asyncio.gather(*(self._send(OpenBatch.of_one(batch.topic, p,
                                                                   batch.create))
                                       for p in batch.pendings))
                return
            for pending in batch.pendings:
                _answer(pending, None, error)
        except asyncio.CancelledError:
            for pending in batch.pendings:
                pending.slot.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - raised in every caller instead
            for pending in batch.pendings:
                _answer(pending, None, error)
        else:
            for pending, own in zip(batch.pendings, batch.replies(reply)):
                _answer(pending, own, None)

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(self._appends, self._requests, self._splits, self._inside,
                                self._at_once)

    async def close(self) -> None:
        """Send the open batches now and wait until every batch is answered."""
        self._closed = True
        for where in list(self._open):
            self._flush(where)
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)
