"""Concurrent appends to one topic sent to its shard as one Append (issue 18), without a
timer: an append goes at once while fewer than `in_flight_max` requests of its lane are out;
otherwise it waits, and when one of them is answered the waiting appends leave together
(Nagle's rule). So a lone append pays no wait, and N appends that arrive during one round
trip cost one request, one encode, one shard staging and one reply instead of N.

A lane is a topic, the fields an Append shares between its records (create, node, acks)
and the form of its records (a list, or the array form: docs/PROTOCOL.md 6.1; arrays join
into one array). Only appends without an idempotency key of the client's and without a
config join others (AppendPlan.batchable); the rest go alone, as sent. The batch is
written under a key of the gateway's session, so a retry of the batch by the client
library is deduped as a whole, as a lone append's is.

Each caller gets its own reply, cut from the batch's: its first_seq is the batch's plus the
records before it, seqs its own range, head_seq the batch's, `created` true for the first
caller only (the cut is client/append_linger.py's, which the client's linger makes the same
way). A batch refused for its content (SPLIT_CODES, or a 429 naming a limit) is sent
again one caller at a time, each as it would have been sent alone, so only the callers
whose own append is refused fail, with their own error (an append is all or nothing, so
nothing of the refused batch was written); any other error is every caller's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Awaitable, Callable

from topics_actors.client.append_linger import cut_replies, own_error, refused_for_content
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Append

IN_FLIGHT_MAX = 1                 # requests of one lane out at once before appends wait
BATCH_RECORDS_MAX = 1_000         # records of one coalesced Append
BATCH_BYTES_MAX = 1_048_576       # its wire bytes (AppendPlan.wire_bytes)

Call = Callable[[str, Append], Awaitable[dict]]


class _Waiting:
    __slots__ = ("message", "wire_bytes", "count", "future")

    def __init__(self, message: Append, wire_bytes: int, count: int, future: asyncio.Future):
        self.message = message
        self.wire_bytes = wire_bytes
        self.count = count               # its records
        self.future = future


class _Lane:
    __slots__ = ("out", "waiting")

    def __init__(self):
        self.out = 0                            # requests of this lane in flight
        self.waiting: deque[_Waiting] = deque()


@dataclasses.dataclass(frozen=True)
class CoalescerStatistics:
    appends: int = 0          # appends that could join others
    requests: int = 0         # Append requests sent for them
    split_batches: int = 0    # batches refused and sent again one caller at a time


class AppendCoalescer:
    def __init__(self, call: Call, session_key: Callable[[], str],
                 in_flight_max: int = IN_FLIGHT_MAX, records_max: int = BATCH_RECORDS_MAX,
                 bytes_max: int = BATCH_BYTES_MAX):
        """`call(topic, msg)`: the engine's request; `session_key()`: a fresh key of the
        gateway's session for each batch."""
        assert in_flight_max >= 1 and records_max >= 1 and bytes_max >= 1
        self._call = call
        self._session_key = session_key
        self._in_flight_max = in_flight_max
        self._records_max = records_max
        self._bytes_max = bytes_max
        self._lanes: dict[tuple, _Lane] = {}
        self._tasks: set[asyncio.Task] = set()
        self._appends = self._requests = self._splits = 0

    def statistics(self) -> CoalescerStatistics:
        return CoalescerStatistics(self._appends, self._requests, self._splits)

    async def append(self, msg: Append, batchable: bool, wire_bytes: int, count: int) -> dict:
        """The shard's reply to `msg` (`count` records), as if it had been sent alone."""
        if not batchable or count > self._records_max or wire_bytes > self._bytes_max:
            return await self._call(msg.topic, msg)
        self._appends += 1
        where = (msg.topic, msg.create, msg.node, msg.acks, type(msg.records))
        lane = self._lanes.get(where)
        if lane is None:
            lane = self._lanes[where] = _Lane()
        if lane.out < self._in_flight_max and not lane.waiting:
            lane.out += 1
            self._requests += 1
            try:
                return await self._call(msg.topic, msg)
            finally:
                lane.out -= 1
                self._next(where, lane)
        future = asyncio.get_running_loop().create_future()
        lane.waiting.append(_Waiting(msg, wire_bytes, count, future))
        return await future

    def _next(self, where: tuple, lane: _Lane) -> None:
        """Send what waits in `lane` while it has room; forget an idle lane."""
        while lane.waiting and lane.out < self._in_flight_max:
            batch = self._take(lane)
            if not batch:
                continue
            lane.out += 1
            self._requests += 1
            task = asyncio.get_running_loop().create_task(self._send(where, lane, batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if not lane.out and not lane.waiting:
            self._lanes.pop(where, None)

    def _take(self, lane: _Lane) -> list[_Waiting]:
        """The next batch: the waiting appends in order, within the limits; callers that
        went away meanwhile are dropped (their records were never sent)."""
        batch, records, size = [], 0, 0
        waiting = lane.waiting
        while waiting:
            head = waiting[0]
            if head.future.done():
                waiting.popleft()
                continue
            count = head.count
            if batch and (records + count > self._records_max
                          or size + head.wire_bytes > self._bytes_max):
                break
            waiting.popleft()
            batch.append(head)
            records += count
            size += head.wire_bytes
        return batch

    async def _send(self, where: tuple, lane: _Lane, batch: list[_Waiting]) -> None:
        try:
            if len(batch) == 1:
                await _answer_alone(self._call, batch[0])
            else:
                await self._send_batch(batch)
        finally:
            lane.out -= 1
            self._next(where, lane)

    async def _send_batch(self, batch: list[_Waiting]) -> None:
        first = batch[0].message
        if type(first.records) is bytes:     # arrays: one array of all their elements
            records = b"[" + b",".join(w.message.records[1:-1] for w in batch) + b"]"
        else:
            records = [rec for waiting in batch for rec in waiting.message.records]
        msg = Append(first.topic, records, first.node, self._session_key(), first.create,
                     None, False, prevalidated=first.prevalidated, acks=first.acks)
        try:
            reply = await self._call(first.topic, msg)
        except TopicsError as error:
            if refused_for_content(error):
                self._splits += 1
                self._requests += len(batch)
                await asyncio.gather(*(_answer_alone(self._call, w) for w in batch))
                return
            _fail(batch, error)
        except asyncio.CancelledError:
            for waiting in batch:
                waiting.future.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - every caller raises it instead
            _fail(batch, error)
        else:
            shares = [(w.count, w.message.return_seqs) for w in batch]
            for waiting, own in zip(batch, cut_replies(reply, shares)):
                if not waiting.future.done():
                    waiting.future.set_result(own)


async def _answer_alone(call: Call, waiting: _Waiting) -> None:
    try:
        reply = await call(waiting.message.topic, waiting.message)
    except asyncio.CancelledError:
        waiting.future.cancel()
        raise
    except Exception as error:  # noqa: BLE001 - its caller raises it
        if not waiting.future.done():
            waiting.future.set_exception(error)
    else:
        if not waiting.future.done():
            waiting.future.set_result(reply)


def _fail(batch: list[_Waiting], error: BaseException) -> None:
    """Every caller raises its own copy (one exception object raised in many tasks would
    pile their tracebacks onto one another)."""
    for waiting in batch:
        if not waiting.future.done():
            waiting.future.set_exception(own_error(error))
