"""The linger batcher on the event loop (the rules: linger_batcher.py): AsyncClient's
linger, and the gateway's append coalescer (gateway/append_coalescer.py), through
`append` (a caller's records and options) and `append_message` (an Append already built
and checked) alike.

An append joins its lane; a lane that starts waiting arms its send: a timer of linger_ms
(fixed linger, or adaptive without room in flight: the bound), or the end of the loop's
current turn (adaptive with room), so the appends made in that turn join it (the callers
one reply woke re-append in the same turn) and none waits for a timer. A full batch goes
at once. Each batch is sent as a task of its own, so several may be in flight (within the
connection's max_in_flight window); when one is answered, a batch of its lane that waits on
its bound goes at the end of the turn. The coalescer's timing instead sends an append that
finds room in flight at once, in its caller's task, and a waiting batch as soon as its lane
has room again, with no timer at all.

At most `waiting_max` appends are inside at a time (waiting or in flight); more wait for
room. close() sends the waiting batches at once and waits for every batch's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from topics_actors.client.linger_batcher import (
    Batch, ClientStatistics, Lane, LingerBatcher, LingerOptions, Pending, batch_key,
    closed_error, own_error, pending_of,
)
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Append

Send = Callable[[str, Append], Awaitable[dict]]


def _answer(pending: Pending, reply: dict | None, error: BaseException | None) -> None:
    future = pending.slot
    if future.done():            # its caller was cancelled
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(reply)


def _gone(pending: Pending) -> bool:
    return pending.slot.done()


class AsyncLinger:
    def __init__(self, send: Send, session_key: Callable[[], str], options: LingerOptions):
        """`send(topic, msg)`: the request, with the sender's retries; `session_key()`: a
        fresh key of the sender's session for each batch."""
        self._send = send
        self._session_key = session_key
        self._options = options
        self._batcher = LingerBatcher(options)
        self._linger_s = options.linger_ms / 1000
        self._sending: set[asyncio.Task] = set()
        self._room = None if options.waiting_max is None else asyncio.Semaphore(
            options.waiting_max)
        self._closed = False

    async def append(self, topic: str, records: list, options: dict) -> dict:
        """A caller's append (Client.append's records and options), answered alone."""
        if self._closed:
            raise closed_error()
        key = batch_key(options)
        pending = pending_of(topic, records, options, key, self._options, self._session_key)
        if pending.message is not None:      # goes alone: its own request, at once
            self._batcher.alone()
            return await self._send(topic, pending.message)
        return await self._join(self._batcher.lane((topic, key), topic, key[0]), pending)

    async def append_message(self, msg: Append, count: int, wire_bytes: int) -> dict:
        """An Append of `count` records (`wire_bytes` on the wire) that may join others:
        the reply it would get alone (its own request when it goes by itself)."""
        array = type(msg.records) is bytes
        batcher = self._batcher
        lane = batcher.lane((msg.topic, msg.create, msg.node, msg.acks, array), msg.topic,
                            msg.create, msg.node, msg.acks, msg.prevalidated, array)
        if self._options.coalesce and not lane.waiting and batcher.room(lane):
            batcher.sent_at_once(lane)        # a lone append pays no wait: as it was built
            try:
                return await self._send(msg.topic, msg)
            finally:
                self._answered(lane, None)
        return await self._join(lane, Pending(msg.records, count, wire_bytes, msg.return_seqs,
                                              msg))

    async def _join(self, lane: Lane, pending: Pending) -> dict:
        if self._room is None:
            return await self._wait(lane, pending)
        async with self._room:
            if self._closed:
                raise closed_error()
            return await self._wait(lane, pending)

    async def _wait(self, lane: Lane, pending: Pending) -> dict:
        batcher = self._batcher
        pending.slot = asyncio.get_running_loop().create_future()
        batcher.add(lane, pending)
        while lane.waiting and not self._options.coalesce and batcher.full(lane):
            self._flush(lane)
        if lane.waiting and lane.wake is None:
            self._arm(lane)
        return await pending.slot

    def _arm(self, lane: Lane) -> None:
        """Schedule the send of a lane that starts waiting (module docstring)."""
        loop = asyncio.get_running_loop()
        if self._batcher.room(lane):
            lane.wake = loop.call_soon(self._flush, lane, True)
        elif not self._options.coalesce:
            lane.wake = loop.call_later(self._linger_s, self._flush, lane)

    def _flush(self, lane: Lane, at_once: bool = False) -> None:
        """Send the lane's next batch, as a task of its own."""
        if lane.wake is not None:
            lane.wake.cancel()
            lane.wake = None
        batch = self._batcher.take(lane, _gone)
        if batch is None:
            return
        self._batcher.at_once += at_once
        task = asyncio.get_running_loop().create_task(self._fly(lane, batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        if lane.waiting and not self._options.coalesce:
            self._arm(lane)       # what did not fit: a batch that starts waiting now

    async def _fly(self, lane: Lane, batch: Batch) -> None:
        try:
            await self._deliver(batch)
        finally:
            self._answered(lane, batch)

    def _answered(self, lane: Lane, batch: Batch | None) -> None:
        """A request of `lane` is answered: what waits for room goes (module docstring)."""
        self._batcher.answered(lane, batch)
        if self._options.coalesce:
            while lane.waiting and self._batcher.room(lane):
                self._flush(lane)
        elif type(lane.wake) is asyncio.TimerHandle and self._batcher.room(lane):
            lane.wake.cancel()     # at the end of this turn, after the callers just
            lane.wake = asyncio.get_running_loop().call_soon(self._flush, lane, True)

    async def _deliver(self, batch: Batch) -> None:
        """Send a batch and answer its callers; one refused for its content goes again one
        caller at a time."""
        try:
            reply = await self._send(batch.lane.topic, batch.message(self._session_key))
        except TopicsError as error:
            if batch.splits_on(error):
                await asyncio.gather(*(self._deliver(one)
                                       for one in self._batcher.split(batch)))
                return
            self._fail(batch, error)
        except asyncio.CancelledError:
            for pending in batch.pendings:
                pending.slot.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - raised in every caller instead
            self._fail(batch, error)
        else:
            for pending, own in zip(batch.pendings, batch.replies(reply)):
                _answer(pending, own, None)

    @staticmethod
    def _fail(batch: Batch, error: BaseException) -> None:
        shared = len(batch.pendings) > 1
        for pending in batch.pendings:
            _answer(pending, None, own_error(error) if shared else error)

    def statistics(self) -> ClientStatistics:
        return self._batcher.statistics()

    async def close(self) -> None:
        """Send the waiting batches now and wait until every batch is answered."""
        self._closed = True
        for lane in self._batcher.lanes_waiting():
            while lane.waiting:
                self._flush(lane)
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)
