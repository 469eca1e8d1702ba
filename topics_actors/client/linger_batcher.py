"""Linger batching (issue 18), written once for every sender: concurrent appends to one
topic sent as one Append, each caller answered with its own seqs. Sans-IO: this module
keeps the lanes of waiting appends, decides when a batch may go, builds a batch's request
and cuts each caller's reply from the batch's; its drivers do the waiting and the sending:
linger_sender.py (the blocking Client's sender thread) and async_linger.py (the event
loop: AsyncClient's linger, and the gateway's append coalescer, gateway/append_coalescer.py).

Rules (docs/CLIENT.md "Linger"; the gateway's: docs/HTTP.md 5):
- Lanes. Appends may share a request when they name one topic and agree on what an Append
  shares between its records: create, node, acks, whether the sender checked the records
  (prevalidated) and their form (a list, or the array form: docs/PROTOCOL.md 6.1; arrays
  join into one array). The client writes an append's `node` option into its records, so
  its lanes differ by topic and `create` only. An append with an idempotency_key of its
  own or a config goes alone (batch_key), and so does one larger than a batch.
- When a batch goes (LingerOptions). Fixed linger (linger_ms a number): when its oldest
  append has waited linger_ms, or at once when full. Adaptive linger (linger_ms "auto",
  Nagle's rule): at once while fewer than `in_flight_max` requests of its lane are in
  flight; otherwise it gathers the appends that arrive until one of them is answered, and
  goes then, or when its oldest append has waited AUTO_LINGER_MS (the bound), or when full.
  The gateway's coalescer is adaptive without a bound and without the early send of a full
  batch, and sends an append that finds room in flight at once, in its caller's task
  (LingerOptions.coalescer).
- A batch holds at most `batch_records_max` records and `batch_bytes_max` bytes (the
  client: data, meta, tag and node plus RECORD_OVERHEAD_BYTES each; the gateway: wire
  bytes), the waiting appends in order; a caller gone before its batch leaves is dropped.
- A batch's reply is cut per caller: its first_seq is the batch's first_seq plus the records
  before it; head_seq is the batch's (the topic's head when the batch was published, at
  least the caller's last_seq); `created` is true for the first caller only. A batch of
  one append that carries its own request (`Pending.message`) sends that, as it was built.
- A batch refused for its content (SPLIT_CODES, or a 429 naming a `limit`) is sent again
  one caller at a time, so only the callers whose own append is refused fail; nothing of
  the refused batch was written (an append is all or nothing). Any other error (not_ready
  until the retry deadline, topic_not_found, forbidden) is every caller's error.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import itertools
from collections.abc import Callable

from topics_actors.client.request_shapes import wire_records
from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.limits import BATCH_RECORDS_MAX, MESSAGE_BYTES_MAX
from topics_actors.protocol.messages import Append

BATCH_RECORDS_MAX_DEFAULT = 1_000
BATCH_BYTES_MAX_DEFAULT = 1_048_576
WAITING_MAX_DEFAULT = 4_096             # appends waiting in a client's batches
LINGER_MS_MAX = 1_000
LINGER_AUTO = "auto"                    # linger_ms for the adaptive linger
# The adaptive linger's bound: a batch waiting this long for a slow request in flight goes
# anyway (a round trip at the benchmark's 50 producers took 1-1.5 ms at its p50, under 8 ms
# at its p99; docs/BENCHMARKS_HISTORY.md "Issue 18: adaptive linger").
AUTO_LINGER_MS = 5.0
IN_FLIGHT_MAX_DEFAULT = 1               # requests of one lane in flight, adaptive
IN_FLIGHT_LIMIT = 4
IDLE_LANES_MAX = 1_024                  # lanes kept without appends in them (a bound)
RECORD_OVERHEAD_BYTES = 16              # msgpack framing of one wire record, at most
BATCH_BYTES_LIMIT = MESSAGE_BYTES_MAX // 2   # leaves room for the envelope, with margin

# Refusals that may come from one caller's records or from the batch's size: the batch is
# sent again one caller at a time.
SPLIT_CODES = frozenset({ErrorCode.INVALID_REQUEST, ErrorCode.BATCH_TOO_LARGE,
                         ErrorCode.RECORD_TOO_LARGE, ErrorCode.PAYLOAD_TOO_LARGE,
                         ErrorCode.TOPIC_FULL})
_BATCHABLE = frozenset({"node", "create", "return_seqs"})
_ALONE = object()      # the key of a lane of one append that goes by itself


@dataclasses.dataclass(frozen=True)
class LingerOptions:
    """A sender's linger settings, checked against the server's limits. `linger_ms`: the
    fixed wait, or with `adaptive` the bound on a batch's wait for a request in flight.
    `waiting_max`: appends inside the batcher at once (None: no bound of its own).
    `coalesce`: the gateway's timing (module docstring)."""
    linger_ms: float
    batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT
    batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT
    waiting_max: int | None = WAITING_MAX_DEFAULT
    adaptive: bool = False
    in_flight_max: int = IN_FLIGHT_MAX_DEFAULT
    coalesce: bool = False

    def __post_init__(self):
        if (isinstance(self.linger_ms, bool) or not isinstance(self.linger_ms, (int, float))
                or not 0 < self.linger_ms <= LINGER_MS_MAX):
            raise invalid(f"linger_ms must be {LINGER_AUTO!r} or in (0, {LINGER_MS_MAX}]")
        if not 1 <= self.batch_records_max <= BATCH_RECORDS_MAX:
            raise invalid(f"linger_batch_records_max must be in [1, {BATCH_RECORDS_MAX}]")
        if not 1 <= self.batch_bytes_max <= BATCH_BYTES_LIMIT:
            raise invalid(f"linger_batch_bytes_max must be in [1, {BATCH_BYTES_LIMIT}]")
        if self.waiting_max is not None and self.waiting_max < 1:
            raise invalid("linger_waiting_max must be at least 1")
        if not 1 <= self.in_flight_max <= IN_FLIGHT_LIMIT:
            raise invalid(f"linger_in_flight_max must be in [1, {IN_FLIGHT_LIMIT}]")
        assert not self.coalesce or self.adaptive, "the coalescer's timing is adaptive"

    @classmethod
    def of(cls, linger_ms: float | str, batch_records_max: int, batch_bytes_max: int,
           waiting_max: int,
           in_flight_max: int = IN_FLIGHT_MAX_DEFAULT) -> "LingerOptions | None":
        """The options, or None for linger_ms 0 (every append sent at once, as before);
        linger_ms "auto" is the adaptive linger, bounded by AUTO_LINGER_MS."""
        if linger_ms == LINGER_AUTO:
            return cls(AUTO_LINGER_MS, batch_records_max, batch_bytes_max, waiting_max,
                       adaptive=True, in_flight_max=in_flight_max)
        if not linger_ms:
            return None
        return cls(linger_ms, batch_records_max, batch_bytes_max, waiting_max)

    @classmethod
    def coalescer(cls, in_flight_max: int, records_max: int,
                  bytes_max: int) -> "LingerOptions":
        """The gateway's timing: adaptive, without a bound, full batches waiting their turn
        (docs/HTTP.md 5)."""
        return cls(AUTO_LINGER_MS, records_max, bytes_max, None, adaptive=True,
                   in_flight_max=in_flight_max, coalesce=True)

    def goes_at_once(self, in_flight: int) -> bool:
        """Whether a batch of a lane with `in_flight` requests out goes without waiting
        (adaptive: while there is room in flight; fixed: never)."""
        return self.adaptive and in_flight < self.in_flight_max


@dataclasses.dataclass(frozen=True)
class ClientStatistics:
    """A client's linger counters (all zero with linger_ms 0)."""
    linger_appends: int = 0        # appends that went through linger
    linger_requests: int = 0       # Append requests sent for them (batches, lone ones)
    linger_split_batches: int = 0  # batches refused and sent again one caller at a time
    linger_waiting: int = 0        # appends waiting for their answer now
    linger_requests_at_once: int = 0   # requests sent without waiting out linger_ms (auto)


class Pending:
    """One caller's append in linger: its records (a list of wire records, or the array
    form), their count and size, and where its answer goes (`slot`, the driver's business).
    `message`: the request this append is when it goes by itself (its own options, or as
    the gateway built it), None when a batch of it alone is built from its lane."""
    __slots__ = ("records", "count", "bytes", "return_seqs", "message", "slot", "since_s")

    def __init__(self, records: list | bytes, count: int, size: int, return_seqs: bool,
                 message: Append | None = None):
        self.records = records
        self.count = count
        self.bytes = size
        self.return_seqs = return_seqs
        self.message = message
        self.slot = None
        self.since_s = 0.0          # when it began to wait (the sender thread's clock)


class Lane:
    """Appends that may travel in one Append (module docstring), waiting in order, and the
    requests of the lane in flight. `wake`: the driver's handle of the lane's next send."""
    __slots__ = ("key", "topic", "create", "node", "acks", "prevalidated", "array",
                 "waiting", "records", "bytes", "out", "wake")

    def __init__(self, key, topic: str, create: bool | None, node: str | None = None,
                 acks: str | None = None, prevalidated: bool = False, array: bool = False):
        self.key = key
        self.topic = topic
        self.create = create
        self.node = node
        self.acks = acks
        self.prevalidated = prevalidated
        self.array = array
        self.waiting: collections.deque[Pending] = collections.deque()
        self.records = 0            # of the waiting appends
        self.bytes = 0
        self.out = 0                # requests of this lane in flight
        self.wake = None


class Batch:
    """The appends of one request: their lane and themselves, in the order they joined."""
    __slots__ = ("lane", "pendings")

    def __init__(self, lane: Lane, pendings: list[Pending]):
        self.lane = lane
        self.pendings = pendings

    def message(self, session_key: Callable[[], str]) -> Append:
        """The request: a lone append's own, or the batch's records under a session key."""
        pendings, lane = self.pendings, self.lane
        if len(pendings) == 1 and pendings[0].message is not None:
            return pendings[0].message
        if lane.array:        # arrays: one array of all their elements
            records = b"[" + b",".join(p.records[1:-1] for p in pendings) + b"]"
        elif len(pendings) == 1:
            records = pendings[0].records
        else:
            records = [rec for pending in pendings for rec in pending.records]
        return Append(lane.topic, records, lane.node, session_key(), lane.create, None, False,
                      prevalidated=lane.prevalidated, acks=lane.acks)

    def replies(self, reply: dict) -> list[dict]:
        """Each caller's reply, cut from the batch's."""
        if len(self.pendings) == 1 and self.pendings[0].message is not None:
            return [reply]
        return cut_replies(reply, [(p.count, p.return_seqs) for p in self.pendings])

    def splits_on(self, error: TopicsError) -> bool:
        """Whether a refused batch is sent again one caller at a time (module docstring)."""
        return len(self.pendings) >= 2 and refused_for_content(error)

    def singles(self) -> list["Batch"]:
        return [Batch(self.lane, [pending]) for pending in self.pendings]


class LingerBatcher:
    """The lanes of one sender and their counters. Not thread-safe: a driver with threads
    holds its own lock around every call."""

    def __init__(self, options: LingerOptions):
        self.options = options
        self._lanes: dict[object, Lane] = {}
        self._alone = itertools.count()
        self.appends = 0            # appends taken (ClientStatistics.linger_appends)
        self.requests = 0           # requests sent for them
        self.splits = 0             # batches sent again one caller at a time
        self.at_once = 0            # requests sent because their lane had room in flight
        self.inside = 0             # appends taken and not answered yet

    def lane(self, key, topic: str, create: bool | None, node: str | None = None,
             acks: str | None = None, prevalidated: bool = False,
             array: bool = False) -> Lane:
        """The lane of `key` (made with these fields when it has none). Idle lanes stay,
        up to IDLE_LANES_MAX, so a topic's lone appends do not make one each."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key, topic, create, node, acks, prevalidated,
                                           array)
        return lane

    def alone_lane(self, topic: str) -> Lane:
        """A lane for one append that goes by itself (its own request, in turn)."""
        return self.lane((_ALONE, next(self._alone)), topic, None)

    def add(self, lane: Lane, pending: Pending) -> None:
        lane.waiting.append(pending)
        lane.records += pending.count
        lane.bytes += pending.bytes
        self.appends += 1
        self.inside += 1

    def alone(self) -> None:
        """An append sent by itself outside the lanes (counted as one request)."""
        self.appends += 1
        self.requests += 1

    def full(self, lane: Lane) -> bool:
        """Whether the lane's waiting appends fill a batch (or more)."""
        options = self.options
        return lane.records >= options.batch_records_max or lane.bytes >= options.batch_bytes_max

    def room(self, lane: Lane) -> bool:
        """Whether the lane's next batch goes at once (adaptive, room in flight)."""
        options = self.options
        return options.adaptive and lane.out < options.in_flight_max

    def take(self, lane: Lane, gone: Callable[[Pending], bool] | None = None) -> Batch | None:
        """The lane's next batch: its waiting appends in order within the limits (at least
        one), skipping callers `gone`; None when none is left. The batch is in flight."""
        options, waiting = self.options, lane.waiting
        taken, records, size = [], 0, 0
        while waiting:
            head = waiting[0]
            if taken and (records + head.count > options.batch_records_max
                          or size + head.bytes > options.batch_bytes_max):
                break
            waiting.popleft()
            lane.records -= head.count
            lane.bytes -= head.bytes
            if gone is not None and gone(head):
                self.inside -= 1
                continue
            taken.append(head)
            records += head.count
            size += head.bytes
        assert lane.records >= 0 and lane.bytes >= 0, "a lane's totals went negative"
        if not taken:
            self._forget_if_idle(lane)
            return None
        lane.out += 1
        self.requests += 1
        return Batch(lane, taken)

    def take_all(self) -> list[Batch]:
        """Every waiting append as batches, lanes in the order of their oldest append."""
        lanes = sorted((lane for lane in self._lanes.values() if lane.waiting),
                       key=lambda lane: lane.waiting[0].since_s)
        batches = []
        for lane in lanes:
            while (batch := self.take(lane)) is not None:
                batches.append(batch)
        return batches

    def oldest_s(self) -> float | None:
        """When the oldest waiting append began to wait (None: nothing waits)."""
        return min((lane.waiting[0].since_s for lane in self._lanes.values() if lane.waiting),
                   default=None)

    def split(self, batch: Batch) -> list[Batch]:
        """A batch refused for its content, as one batch per caller (each a request)."""
        self.splits += 1
        self.requests += len(batch.pendings)
        return batch.singles()

    def answered(self, lane: Lane, batch: Batch | None) -> None:
        """A request of `lane` is answered (`batch`: its appends, answered now; None for an
        append sent at once outside the lane's waiting ones)."""
        assert lane.out > 0, "an answer for a lane with nothing in flight"
        lane.out -= 1
        if batch is not None:
            self.inside -= len(batch.pendings)
        if not lane.out and not lane.waiting:
            self._forget_if_idle(lane)

    def sent_at_once(self, lane: Lane) -> None:
        """An append that found room goes at once, in its caller's task (the coalescer)."""
        lane.out += 1
        self.appends += 1
        self.requests += 1

    def lanes_waiting(self) -> list[Lane]:
        return [lane for lane in self._lanes.values() if lane.waiting]

    def _forget_if_idle(self, lane: Lane) -> None:
        if ((len(self._lanes) > IDLE_LANES_MAX or lane.key[0] is _ALONE) and not lane.out
                and not lane.waiting and lane.wake is None):
            self._lanes.pop(lane.key, None)

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(self.appends, self.requests, self.splits, self.inside,
                                self.at_once)


def batch_key(options: dict) -> tuple | None:
    """The key (`create`) of the batches an append with `options` may join, or None when
    it must go alone (an idempotency_key, a config, an option linger does not know)."""
    if not options.keys() <= _BATCHABLE:
        return None
    return (options.get("create"),)


def pending_of(topic: str, records: list, options: dict, key: tuple | None,
               limits: LingerOptions, session_key: Callable[[], str]) -> Pending:
    """A client caller's append checked as a lone one is (its errors raised here, to the
    caller); one that may not join a batch, or is larger than one, carries its own
    request, made as a lone append's is."""
    node = options.get("node")
    wire = wire_records(records)
    if node is not None:
        wire = [_with_node(rec, node) for rec in wire]
    size = RECORD_OVERHEAD_BYTES * len(wire)
    for rec in wire:     # data alone, the common case, without a generator per record
        size += len(rec[0]) if len(rec) == 1 else sum(len(field) for field in rec if field)
    return_seqs = options.get("return_seqs", True)
    alone = (key is None or not wire or len(wire) > limits.batch_records_max
             or size > limits.batch_bytes_max)
    message = Append(topic, wire, node, options.get("idempotency_key") or session_key(),
                     options.get("create"), options.get("config"), return_seqs) \
        if alone else None
    return Pending(wire, len(wire), size, return_seqs, message)


def _with_node(rec: list, node: str) -> list:
    """A wire record with `node` written in unless it names a node of its own."""
    if len(rec) == 1:
        return [rec[0], None, node, None]
    if rec[2] is None or rec[2] == "":
        rec[2] = node
    return rec


def cut_replies(reply: dict, shares: list[tuple[int, bool]]) -> list[dict]:
    """The replies of the callers whose appends went as one batch, in order, each
    (records, return_seqs), cut from the batch's reply (module docstring)."""
    out, first = [], reply["first_seq"]
    head, created, deduped = reply["head_seq"], reply.get("created", False), \
        reply.get("deduped", False)
    performance = reply.get("performance")
    for count, return_seqs in shares:
        last = first + count - 1
        own = {"topic": reply["topic"], "first_seq": first, "last_seq": last,
               "head_seq": head, "count": count, "created": created, "deduped": deduped}
        if return_seqs:
            own["seqs"] = list(range(first, last + 1))
        if performance is not None:
            own["performance"] = dict(performance)
        out.append(own)
        first, created = last + 1, False
    return out


def refused_for_content(error: TopicsError) -> bool:
    """Whether a batch's refusal may be one caller's alone (SPLIT_CODES, or a 429 naming a
    limit): then each caller's append is sent again by itself."""
    return error.code in SPLIT_CODES or (
        error.code is ErrorCode.THROTTLED and bool((error.detail or {}).get("limit")))


def own_error(error: BaseException) -> BaseException:
    """A caller's own copy of its batch's error: each caller raises it in its own thread or
    task, and one exception object raised in many places would pile their tracebacks onto
    one another."""
    try:
        return copy.copy(error)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied is shared
        return error


def closed_error() -> TopicsError:
    return TopicsError("the client is closed", ErrorCode.INVALID_REQUEST)
