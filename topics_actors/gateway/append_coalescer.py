"""Concurrent appends to one topic sent to its shard as one Append (issue 18), without a
timer: an append goes at once while fewer than `in_flight_max` requests of its lane are out;
otherwise it waits, and when one of them is answered the waiting appends leave together
(Nagle's rule). So a lone append pays no wait, and N appends that arrive during one round
trip cost one request, one encode, one shard staging and one reply instead of N.

The batching is the client library's linger batcher (client/linger_batcher.py, on the
event loop: client/async_linger.py) with the coalescer's timing; this module is the
gateway's use of it. A lane is a topic, the fields an Append shares between its records
(create, node, acks) and the form of its records (a list, or the array form:
docs/PROTOCOL.md 6.1; arrays join into one array). Only appends without an idempotency key
of the client's and without a config join others (AppendPlan.batchable); the rest go
alone, as sent. The batch is written under a key of the gateway's session, so a retry of
the batch by the client library is deduped as a whole, as a lone append's is.

Each caller gets its own reply, cut from the batch's: its first_seq is the batch's plus the
records before it, seqs its own range, head_seq the batch's, `created` true for the first
caller only. A batch refused for its content (SPLIT_CODES, or a 429 naming a limit) is sent
again one caller at a time, each as it would have been sent alone, so only the callers
whose own append is refused fail, with their own error (an append is all or nothing, so
nothing of the refused batch was written); any other error is every caller's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from topics_actors.client.async_linger import AsyncLinger
from topics_actors.client.linger_batcher import LingerOptions
from topics_actors.protocol.messages import Append

IN_FLIGHT_MAX = 1                 # requests of one lane out at once before appends wait
BATCH_RECORDS_MAX = 1_000         # records of one coalesced Append
BATCH_BYTES_MAX = 1_048_576       # its wire bytes (AppendPlan.wire_bytes)

Call = Callable[[str, Append], Awaitable[dict]]


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
        self._call = call
        self._records_max = records_max
        self._bytes_max = bytes_max
        self._linger = AsyncLinger(call, session_key, LingerOptions.coalescer(
            in_flight_max, records_max, bytes_max))

    def statistics(self) -> CoalescerStatistics:
        figures = self._linger.statistics()
        return CoalescerStatistics(figures.linger_appends, figures.linger_requests,
                                   figures.linger_split_batches)

    async def append(self, msg: Append, batchable: bool, wire_bytes: int, count: int) -> dict:
        """The shard's reply to `msg` (`count` records), as if it had been sent alone."""
        if not batchable or count > self._records_max or wire_bytes > self._bytes_max:
            return await self._call(msg.topic, msg)
        return await self._linger.append_message(msg, count, wire_bytes)
