"""A replica's log cut back to where it agrees with its leader's (docs/CLUSTER.md), the one
rule the live follower, a shard's recovery, the compactor and fsck apply to a Truncate frame.

A follower whose log diverged from its leader's (Kafka KIP-101: it holds records of an
epoch the new leader never had) keeps seqs up to `last` and drops every record above; the
same seqs are then written again with the leader's records. Everything a topic keeps per
seq therefore forgets the dropped ones: the WAL index, count and bytes, the head and its
reservations, the epoch cache, idempotency keys naming them, the tag index, trim runs and
the lease state of queue jobs (a replicated queue's durable leases live on its followers
too: the jobs kept keep theirs). Floors, the high watermark and absorbed records stay: a
cut is allowed only above all of them (`refusal`), so no reader ever saw a dropped record
and no segment holds one the shard has taken in.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
from array import array
from collections.abc import Callable

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.deleted_seqs import DeletedSeqs
from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.topic_state import TopicState
from topics_actors.ledger import retention_rules
from topics_actors.ledger.queue_state import QueueState

Reader = Callable[[TopicState, int], object]


def refusal(topic: TopicState, last: int) -> str | None:
    """Why `topic` cannot be cut in place after `last` (None: it can). The caller adds what
    only it knows (a checkpoint open, work staged in its batch)."""
    if topic.ram_file or not topic.config.logged:
        return "not_logged"              # records in a RAM buffer: not worth the care
    if last < topic.absorbed:
        return "absorbed"                # records to drop are in segments already
    if last < (topic.hw or 0):
        return "below_hw"                # never drop what readers may have seen
    if last < max(live_floor(topic), topic.gone_through):
        return "below_floors"
    if topic.next_seq != topic.head + 1:
        return "staged"                  # records staged above the head, not published
    return None


@dataclasses.dataclass
class Dropped:
    """What a cut removed, enough to put it back (a batch whose WAL write failed)."""
    last: int
    records: int
    payload_bytes: int
    head: int
    next_seq: int
    reserved_head: int
    locs: array
    front: int
    epochs: list
    deleted: DeletedSeqs
    tags: object
    trims: list | None
    dedupe: list
    queue: object


def cut(topic: TopicState, last: int, read: Reader | None, undoable: bool = False) -> Dropped:
    """Drop every record of `topic` above seq `last`. `read(topic, seq)` gives a record or
    None (a hole); with read None (fsck's audit) count and bytes are left alone. With
    `undoable` the result can put the queue state back too (`restore`). Raises
    InvariantViolation if a dropped record is absorbed (the caller checks `refusal`)."""
    if topic.indexed and last < topic.absorbed:
        raise InvariantViolation(f"{topic.name!r}: cut after seq {last} below the absorbed "
                                 f"seq {topic.absorbed}")
    records = payload = 0
    if read is not None:
        for seq in range(last + 1, topic.head + 1):
            rec = read(topic, seq)
            if rec is not None:
                records += 1
                payload += retention_rules.record_size(rec)
    keep = max(0, last + 1 - topic.wal_base)
    dropped = Dropped(last, records, payload, topic.head, topic.next_seq, topic.reserved_head,
                      topic.locs[keep:] if topic.indexed else array("Q"), topic.front,
                      topic.epochs.entries() if topic.epochs is not None else [],
                      topic.deleted.take_above(last), topic.tags,
                      [list(t) for t in topic.trims] if topic.trims is not None else None,
                      _drop_keys(topic, last),
                      copy.deepcopy(topic.queue) if undoable else None)
    if topic.indexed:
        del topic.locs[keep:]
        topic.front = min(topic.front, len(topic.locs))
    topic.head = min(topic.head, last)
    topic.reserved_head = min(topic.reserved_head, last)   # the old leader's reservations
    topic.next_seq = topic.head + 1
    topic.count -= records
    topic.bytes -= payload
    if topic.epochs is not None:
        topic.epochs.truncate_to(last + 1)
    topic.tags = None                    # rebuilt from the records on its next use
    if topic.trims:
        topic.trims = [[f, min(t, last)] for f, t in topic.trims if f <= last] or None
    if topic.queue is not None:
        _cut_queue(topic.queue, last)
    return dropped


def restore(topic: TopicState, dropped: Dropped) -> None:
    """Undo `cut` (nothing was staged for the topic in between)."""
    if topic.indexed:
        topic.locs.extend(dropped.locs)
    topic.head, topic.next_seq = dropped.head, dropped.next_seq
    topic.reserved_head, topic.front = dropped.reserved_head, dropped.front
    topic.count += dropped.records
    topic.bytes += dropped.payload_bytes
    if topic.epochs is not None:
        topic.epochs.truncate_to(0)
        for epoch, start in dropped.epochs:
            topic.epochs.assign(epoch, start)
    topic.deleted.put_back(dropped.deleted)
    topic.tags, topic.trims, topic.queue = dropped.tags, dropped.trims, dropped.queue
    topic.dedupe.put_back(dropped.dedupe)


def _cut_queue(queue: QueueState, last: int) -> None:
    """Forget the lease state of dropped jobs (leases, deliveries, delays) and let the
    claim cursor take the seqs again; jobs up to `last` keep theirs."""
    for table in (queue.leases, queue.deliveries, queue.delayed):
        for seq in [s for s in table if s > last]:
            del table[seq]
    queue.moving = {s for s in queue.moving if s <= last}
    queue.leaving = {s for s in queue.leaving if s <= last}
    queue.reclaim = [s for s in queue.reclaim if s <= last]
    queue.delayed_heap = [e for e in queue.delayed_heap if e[1] <= last]
    queue.expiries = [e for e in queue.expiries if e[1] <= last]
    for heap in (queue.reclaim, queue.delayed_heap, queue.expiries):
        heapq.heapify(heap)
    queue.cursor = min(queue.cursor, last + 1)


def _drop_keys(topic: TopicState, last: int) -> list:
    """Forget idempotency keys whose records are dropped (a retry must not be answered
    with seqs that hold another record now); returns (key, entry) to restore."""
    return topic.dedupe.drop_after(last)
