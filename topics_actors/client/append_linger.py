"""Linger (issue 18): concurrent appends to one topic sent as one Append, each caller
answered with its own seqs. The pure part both clients share: which appends may share a
request, the bounds of a batch, the batch's request, each caller's reply from the batch's
reply, and when a batch may go. The sync client's sender thread (linger_sender.py) and the
async client's timers (async_linger.py) do the waiting and the sending.

Rules (docs/CLIENT.md "Linger"):
- When a batch goes. Fixed linger (linger_ms a number): when its oldest append has waited
  linger_ms, or at once when full. Adaptive linger (linger_ms "auto", Nagle's rule): at
  once while fewer than `in_flight_max` requests of its topic and key are in flight;
  otherwise it gathers the appends that arrive until one of them is answered, and goes
  then, or when its oldest append has waited AUTO_LINGER_MS (the bound), or when full.
- An append may join a batch when it has no idempotency_key and no config; batches are keyed
  by topic and `create`. Its records are checked here the way a lone append's are (a record
  that is not a dict with `data`, or JSON that cannot be written, fails its caller at once);
  its `node` option is written into each record that names no node of its own, which is what
  the shard would do with the batch's default node.
- A batch holds at most `batch_records_max` records and `batch_bytes_max` payload bytes
  (data, meta, tag and node, plus RECORD_OVERHEAD_BYTES each), both within the server's
  limits; an append larger than either goes alone.
- A batch's reply is cut per caller: its first_seq is the batch's first_seq plus the records
  before it; head_seq is the batch's (the topic's head when the batch was published, at
  least the caller's last_seq); `created` is true for the first caller only.
- A batch refused for its content (SPLIT_CODES, or a 429 naming a `limit`) is sent again
  one caller at a time, so only the callers whose own append is refused fail; nothing of
  the refused batch was written (an append is all or nothing). Any other error (not_ready
  until the retry deadline, topic_not_found, forbidden) is every caller's error.
"""

from __future__ import annotations

import copy
import dataclasses

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
IN_FLIGHT_MAX_DEFAULT = 1               # requests of one topic and key in flight, adaptive
IN_FLIGHT_LIMIT = 4
RECORD_OVERHEAD_BYTES = 16              # msgpack framing of one wire record, at most
BATCH_BYTES_LIMIT = MESSAGE_BYTES_MAX // 2   # leaves room for the envelope, with margin

# Refusals that may come from one caller's records or from the batch's size: the batch is
# sent again one caller at a time.
SPLIT_CODES = frozenset({ErrorCode.INVALID_REQUEST, ErrorCode.BATCH_TOO_LARGE,
                         ErrorCode.RECORD_TOO_LARGE, ErrorCode.PAYLOAD_TOO_LARGE,
                         ErrorCode.TOPIC_FULL})
_BATCHABLE = frozenset({"node", "create", "return_seqs"})


@dataclasses.dataclass(frozen=True)
class LingerOptions:
    """A client's linger settings, checked against the server's limits. `linger_ms`: the
    fixed wait, or with `adaptive` the bound on a batch's wait for a request in flight."""
    linger_ms: float
    batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT
    batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT
    waiting_max: int = WAITING_MAX_DEFAULT
    adaptive: bool = False
    in_flight_max: int = IN_FLIGHT_MAX_DEFAULT

    def __post_init__(self):
        if (isinstance(self.linger_ms, bool) or not isinstance(self.linger_ms, (int, float))
                or not 0 < self.linger_ms <= LINGER_MS_MAX):
            raise invalid(f"linger_ms must be {LINGER_AUTO!r} or in (0, {LINGER_MS_MAX}]")
        if not 1 <= self.batch_records_max <= BATCH_RECORDS_MAX:
            raise invalid(f"linger_batch_records_max must be in [1, {BATCH_RECORDS_MAX}]")
        if not 1 <= self.batch_bytes_max <= BATCH_BYTES_LIMIT:
            raise invalid(f"linger_batch_bytes_max must be in [1, {BATCH_BYTES_LIMIT}]")
        if self.waiting_max < 1:
            raise invalid("linger_waiting_max must be at least 1")
        if not 1 <= self.in_flight_max <= IN_FLIGHT_LIMIT:
            raise invalid(f"linger_in_flight_max must be in [1, {IN_FLIGHT_LIMIT}]")

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

    def goes_at_once(self, in_flight: int) -> bool:
        """Whether a batch of a topic and key with `in_flight` requests out goes without
        waiting (adaptive: while there is room in flight; fixed: never)."""
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
    """One caller's append in linger: its wire records, and where its answer goes (`slot`,
    the client's business). `options` is set for an append that must go alone: its own
    request, as it was given."""
    __slots__ = ("records", "return_seqs", "bytes", "options", "slot")

    def __init__(self, records: list, return_seqs: bool, size: int, options: dict | None):
        self.records = records
        self.return_seqs = return_seqs
        self.bytes = size
        self.options = options
        self.slot = None

    @property
    def alone(self) -> bool:
        return self.options is not None


def batch_key(options: dict) -> tuple | None:
    """The key (`create`) of the batches an append with `options` may join, or None when
    it must go alone (an idempotency_key, a config, an option linger does not know)."""
    if not options.keys() <= _BATCHABLE:
        return None
    return (options.get("create"),)


def pending_of(records: list, options: dict, key: tuple | None,
               limits: LingerOptions) -> Pending:
    """A caller's append checked as a lone one is (its errors raised here, to the caller);
    one that may not join a batch, or is larger than one, keeps its options to go alone."""
    node = options.get("node")
    wire = wire_records(records)
    if node is not None:
        wire = [_with_node(rec, node) for rec in wire]
    size = RECORD_OVERHEAD_BYTES * len(wire)
    for rec in wire:     # data alone, the common case, without a generator per record
        size += len(rec[0]) if len(rec) == 1 else sum(len(field) for field in rec if field)
    alone = (key is None or not wire or len(wire) > limits.batch_records_max
             or size > limits.batch_bytes_max)
    return Pending(wire, options.get("return_seqs", True), size, options if alone else None)


def _with_node(rec: list, node: str) -> list:
    """A wire record with `node` written in unless it names a node of its own."""
    if len(rec) == 1:
        return [rec[0], None, node, None]
    if rec[2] is None or rec[2] == "":
        rec[2] = node
    return rec


class OpenBatch:
    """Appends of one topic and key gathering until they may go (module docstring)."""
    __slots__ = ("topic", "create", "pendings", "records", "bytes")

    def __init__(self, topic: str, create: bool | None):
        self.topic = topic
        self.create = create
        self.pendings: list[Pending] = []
        self.records = 0
        self.bytes = 0

    @classmethod
    def of_one(cls, topic: str, pending: Pending, create: bool | None) -> "OpenBatch":
        batch = cls(topic, create)
        batch.add(pending)
        return batch

    def fits(self, pending: Pending, limits: LingerOptions) -> bool:
        return (self.records + len(pending.records) <= limits.batch_records_max
                and self.bytes + pending.bytes <= limits.batch_bytes_max)

    def add(self, pending: Pending) -> None:
        self.pendings.append(pending)
        self.records += len(pending.records)
        self.bytes += pending.bytes

    def full(self, limits: LingerOptions) -> bool:
        """Whether no more single-record append would fit."""
        return (self.records >= limits.batch_records_max
                or self.bytes >= limits.batch_bytes_max)

    def message(self, session_key: str) -> Append:
        """The request: a lone append's own, or the batch's records under a session key."""
        first = self.pendings[0]
        if first.alone:
            options = first.options
            return Append(self.topic, first.records, options.get("node"),
                          options.get("idempotency_key") or session_key,
                          options.get("create"), options.get("config"), first.return_seqs)
        records = self.pendings[0].records if len(self.pendings) == 1 else [
            rec for pending in self.pendings for rec in pending.records]
        return Append(self.topic, records, None, session_key, self.create, None, False)

    def replies(self, reply: dict) -> list[dict]:
        """Each caller's reply, cut from the batch's."""
        if self.pendings[0].alone:
            return [reply]
        return cut_replies(reply, [(len(p.records), p.return_seqs) for p in self.pendings])


def cut_replies(reply: dict, shares: list[tuple[int, bool]]) -> list[dict]:
    """The replies of the callers whose appends went as one batch, in order, each
    (records, return_seqs), cut from the batch's reply (module docstring). The gateway's
    append coalescer cuts its batches' replies the same way."""
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


def splits_on(batch: OpenBatch, error: TopicsError) -> bool:
    """Whether a refused batch is sent again one caller at a time (module docstring)."""
    return len(batch.pendings) >= 2 and refused_for_content(error)


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
