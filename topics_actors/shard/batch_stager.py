"""One group-commit batch of a shard, and the stager that builds it.

Requests of one loop turn are staged into the current Batch: their WAL frames go into one
buffer, their answers wait as operations (Op) until the batch is durable, and every topic
they change gets an undo entry first, so a failed write or sync can put the shard back as
it was. Staging never publishes: a topic's head, index and counters change only when the
commit runs the operations.
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable

from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError
from topics_actors.ledger.retention_rules import Floors
from topics_actors.ledger.topic_state import TopicState
from topics_actors.limits import INBOX_BYTES_MAX, INBOX_REQUESTS_MAX
from topics_actors.record_batch import PlainBatch
from topics_actors.shard.shard_stats import ShardStats
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage.frame import encode, encode_appends, encode_batch
from topics_actors.storage.frame_types import FLAG_DURABLE


@dataclasses.dataclass
class CommitInfo:
    """What a commit tells the operations it answers, and what they tell it back."""
    file_no: int = 0
    idx: int = 0                 # WAL file of the batch
    offset: int = 0              # where the batch starts in it
    end: int = 0                 # where it ends
    wal_ms: float = 0.0
    fsync_ms: float = 0.0
    woken: set[str] = dataclasses.field(default_factory=set)   # topics readers wait on


OpFn = Callable[[CommitInfo], object]


class Op:
    """One request's answer, run once the batch it was staged in has committed."""
    __slots__ = ("peer", "corr", "t0_ns", "is_write", "fn")

    def __init__(self, peer: bytes, corr: int, t0_ns: int, is_write: bool, fn: OpFn):
        self.peer, self.corr, self.t0_ns, self.is_write, self.fn = peer, corr, t0_ns, is_write, fn


# What a request handler returns: whether the op writes (it fails with its batch), and the
# function that answers it after the commit.
Staged = tuple[bool, OpFn]


def write_op(fn: OpFn) -> Staged:
    return True, fn


def read_op(fn: OpFn) -> Staged:
    return False, fn


def fail_with(error: TopicsError) -> OpFn:
    """An operation that answers with `error`."""
    def fail(_info: CommitInfo) -> dict:
        raise error
    return fail


# An undo entry: the topic registered under a name before the batch (None: no topic) and
# the staged fields it had then.
Undo = tuple[TopicState | None, int, int, object]


class Batch:
    def __init__(self):
        self.buf = bytearray()
        self.needs_sync = False
        self.ops: list[Op] = []
        self.writes = 0
        self.undo: dict[str, Undo] = {}
        self.dedupe_added: list[tuple[TopicState, str]] = []
        self.created: list[TopicState] = []
        self.retention: dict[str, tuple[TopicState, Floors]] = {}
        self.undo_fns: list[Callable[[], None]] = []   # state outside a topic's fields
        self.touched: set[str] = set()    # changed at commit, without an undo (deletes)


class BatchStager:
    def __init__(self, clock: Callable[[], int], stats: ShardStats):
        self.clock = clock
        self.stats = stats
        self.batch = Batch()

    def take(self) -> Batch:
        """The batch to commit; staging goes on in a fresh one."""
        batch, self.batch = self.batch, Batch()
        return batch

    def add(self, op: Op) -> None:
        self.batch.writes += op.is_write
        self.batch.ops.append(op)

    def inbox_full(self) -> bool:
        batch = self.batch
        return batch.writes >= INBOX_REQUESTS_MAX or len(batch.buf) >= INBOX_BYTES_MAX

    def throttle(self) -> None:
        """Refuse a write the batch has no room for (retryable), before it stages anything."""
        if self.inbox_full():
            self.stats.throttled += 1
            raise TopicsError("shard inbox is full; retry", ErrorCode.THROTTLED,
                              {"retry_after_ms": 1000})

    def save_undo(self, name: str, topic: TopicState | None) -> None:
        """Remember how `name` stood before this batch (once per batch): call it before
        staging any change to the topic."""
        undo = self.batch.undo
        if name not in undo:
            undo[name] = ((topic, topic.next_seq, topic.reserved_head, topic.config)
                          if topic is not None else (None, 0, 0, None))

    def frame(self, ftype: int, topic: TopicState | None, data: bytes, seq: int = 0,
              sync: bool = True) -> None:
        """Stage one control frame; `sync` makes the batch fdatasync before it is answered."""
        batch = self.batch
        encode(batch.buf, ftype, FLAG_DURABLE if sync else 0, topic.tid if topic else 0,
               seq, self.clock(), data)
        batch.needs_sync |= sync

    def appends(self, topic: TopicState, first: int, ts: int, records: list,
                sync: bool) -> Offsets:
        """Stage the frames of `records` from seq `first`; where they are in the batch's
        buffer (encode_staged)."""
        self._check_first(topic, first)
        self.batch.needs_sync |= sync
        return encode_staged(self.batch.buf, topic.tid, first, ts,
                             FLAG_DURABLE if sync else 0, records)

    def frames(self, topic: TopicState, first: int, frames, sync: bool) -> int:
        """Stage Append frames of seqs from `first` as they are (a follower's copy of its
        leader's frames, checked by shard/replication/replica_frames.py); where they start in the
        batch's buffer."""
        self._check_first(topic, first)
        self.batch.needs_sync |= sync
        buf = self.batch.buf
        start = len(buf)
        buf += frames
        return start

    def _check_first(self, topic: TopicState, first: int) -> None:
        if topic.name not in self.batch.undo:
            raise InvariantViolation(f"records of {topic.name!r} staged without an undo entry")
        if first <= topic.head:
            raise InvariantViolation(f"{topic.name!r}: seq {first} staged at or below the "
                                     f"head {topic.head}")
        if first < topic.next_seq:
            raise InvariantViolation(f"{topic.name!r}: seq {first} staged again in one batch "
                                     f"(its next seq is {topic.next_seq})")


# Where staged records' frames start in a buffer: one offset per record (Append frames),
# or one int for all of them (the AppendBatch frame of a PlainBatch).
Offsets = list[int] | int


def encode_staged(buf: bytearray, topic_id: int, first: int, ts: int, flags: int,
                  records: list) -> Offsets:
    """The frames of staged records into `buf`: a PlainBatch as one AppendBatch frame
    (storage/batch_frame.py), any other records as one Append frame each."""
    if type(records) is PlainBatch:
        return encode_batch(buf, topic_id, first, ts, flags, records.node, records.texts,
                            records.ends)
    return encode_appends(buf, topic_id, first, ts, flags, records)


def locations(base: int, offsets: Offsets, count: int) -> list[int] | array:
    """The locations of `count` records whose frames start at `offsets` (encode_staged)
    from location `base`."""
    if type(offsets) is int:
        return array("Q", (base + offsets,)) * count
    return [base + rel for rel in offsets]


def roll_back(batch: Batch, registry: TopicRegistry) -> None:
    """Put the registry and every staged topic back as they were before `batch`."""
    for undo in reversed(batch.undo_fns):   # queue leases (shard/queues/queue_ops.py)
        undo()
    for topic, key in batch.dedupe_added:
        if topic.name not in batch.undo:
            raise InvariantViolation(f"idempotency key of {topic.name!r} staged without undo")
        topic.dedupe.discard(key)
    for name, (topic, next_seq, reserved, config) in batch.undo.items():
        current = registry.get(name)
        if current is not None and current is not topic:
            registry.unregister(current)
        if topic is not None:
            if current is not topic:
                registry.register(topic)
            topic.next_seq, topic.reserved_head, topic.config = next_seq, reserved, config
            if topic.next_seq <= topic.head:
                raise InvariantViolation(f"{name!r} rolled back to next seq {next_seq} at or "
                                         f"below its head {topic.head}")
