"""Moving a queue's jobs to its dead-letter topic (spec/api.md 8), the core's part.

A job claimed more than `max_deliveries` times goes to the topic's `dead_letter` topic with
its data, tag, node and meta plus where it came from. Two ways, and the guarantee of both is
the same: at least once into the dead-letter topic, never lost.

- Dead-letter topic in this shard: the Append to it and the queue's dead-lettered Lease
  frame (event 4) go into one batch, the Append first. A crash keeps both, neither, or only
  the Append (the job is then moved again on a later claim).
- In another shard: the job is first marked moving, a Lease frame (event 5) logged with the
  queue's class: it leaves the ready set, the mark survives crashes and checkpoints (the
  snapshot carries it). The shard's socket shell (shard/queues/dead_letter_sender.py) then sends
  the Append to the owning shard, with an idempotency key naming the job, and retries until
  it is acknowledged; only then does a MoveDone stage the dead-lettered frame and delete the
  job. A crash between the two sends it again (deduplicated within the dead-letter topic's
  idempotency window, a second copy after it).

Pure: the shell only moves bytes (move_request gives the message, MoveDone the outcome).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import orjson

from topics_actors.errors import TopicsError
from topics_actors.ledger import delete_rules
from topics_actors.ledger.queue_state import (
    DEAD_LETTERED, MOVING, Lease, QueueState, queue_of,
)
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import Append
from topics_actors.record_envelope import has_meta, split
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, read_op
from topics_actors.shard.record_append import RecordAppend
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_identity import topic_id

Move = tuple[str, int]     # (queue, job seq)


@dataclasses.dataclass(frozen=True, slots=True)
class MoveDone:
    """shell -> core (never on the wire): the Append of job `seq` of queue `topic` to its
    dead-letter topic in another shard was acknowledged (or the job is gone)."""
    topic: str
    seq: int


def log_lease(stager: BatchStager, topic: TopicState, seq: int, event: int,
                      lease: Lease, deliveries: int, events: list | None = None) -> None:
    """One Lease frame of job `seq`, with the topic's class; its event also goes to
    `events` (a replicated queue's lease op, shard/replication/replica_ops.py)."""
    stager.frame(FrameType.LEASE, topic, frame_body.encode_lease(frame_body.LeaseBody(
        event, lease.lease_id, lease.deadline, deliveries, lease.node)),
        seq=seq, sync=topic.config.durability.acks_after_fsync)
    if events is not None:
        events.append([seq, event, lease.lease_id, lease.deadline, deliveries, lease.node])


class DeadLetterMoves:
    def __init__(self, stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
                 appends: RecordAppend):
        self.stager = stager
        self.registry = registry
        self.reader = reader
        self.appends = appends
        self.outbox: set[Move] = set()      # moves to other shards not acknowledged yet
        self.recovered = False

    def move(self, topic: TopicState, state: QueueState, moving: list[int]
              ) -> tuple[bool, Callable[[], None], Callable[[CommitInfo], None]]:
        """Stage the moves of `moving`. Returns (whether it logged or appended anything, the
        undo, the publish to run after the commit)."""
        if not moving:
            return False, lambda: None, lambda info: None
        if self.registry.owns(topic_id(topic.config.dead_letter)):
            return self._move_local(topic, state, moving)
        for seq in moving:
            state.move(seq)
            if topic.config.logged:
                log_lease(self.stager, topic, seq, MOVING, Lease("", 0, 0),
                                  state.deliveries.get(seq, 0))

        def undo() -> None:
            for seq in moving:
                state.moving.discard(seq)
                state.give_back(seq)

        def publish(info: CommitInfo) -> None:
            self.outbox.update((topic.name, seq) for seq in moving)
        return topic.config.logged, undo, publish

    def _move_local(self, topic: TopicState, state: QueueState, moving: list[int]):
        """An Append to the dead-letter topic and a dead-lettered Lease frame per job, in
        this batch. Jobs the dead-letter topic refuses (full, throttled) stay."""
        moved, publishes = [], []
        for n, seq in enumerate(moving):
            try:
                _, publish = self.appends.append(self._append(topic, seq))
            except TopicsError:
                for rest in moving[n:]:
                    state.give_back(rest)
                break
            publishes.append(publish)
            moved.append(seq)
            if topic.config.logged:
                log_lease(self.stager, topic, seq, DEAD_LETTERED, Lease("", 0, 0),
                                  state.deliveries.get(seq, 0))

        def undo() -> None:
            for seq in moved:
                state.give_back(seq)

        def publish_moves(info: CommitInfo) -> None:
            for publish in publishes:
                publish(info)
            self._gone(topic, state, moved)
        return bool(moved), undo, publish_moves

    def _gone(self, topic: TopicState, state: QueueState, seqs: list[int]) -> None:
        for seq in seqs:
            state.drop(seq)
            state.dead_lettered += 1
        delete_rules.delete_seqs(topic, self.reader.read, seqs, TopicState.delete_one)

    # --- moves to other shards ----------------------------------------------------------------

    def pending(self) -> set[Move]:
        """Moves still to send; after a restart, every job the lease state says is moving."""
        if not self.recovered:
            self.recovered = True
            for topic in self.registry:
                if topic.queue is not None:
                    self.outbox.update((topic.name, seq) for seq in topic.queue.moving)
        return self.outbox

    def move_request(self, move: Move) -> Append | MoveDone | None:
        """The Append that moves the job; a MoveDone to submit when the job's record is
        gone (nothing to send); None when there is no move any more (the queue or the mark
        is gone, or the queue has no dead-letter topic now: the job is claimable again)."""
        topic = self.registry.get(move[0])
        state = topic.queue if topic is not None else None
        if state is None or move[1] not in state.moving or topic.config.dead_letter is None:
            self.outbox.discard(move)
            if state is not None and move[1] in state.moving:
                state.moving.discard(move[1])
                state.give_back(move[1])
            return None
        if self.reader.read(topic, move[1]) is None:
            return MoveDone(*move)
        return self._append(topic, move[1])

    def done(self, msg: MoveDone) -> Staged:
        """The move of a job to another shard was acknowledged: log it, delete the job.
        Throttled (inbox full), the move stays pending and is sent again."""
        self.stager.throttle()
        self.outbox.discard((msg.topic, msg.seq))
        topic = self.registry.get(msg.topic)
        state = queue_of(topic) if topic is not None else None
        if state is None or msg.seq not in state.moving:
            return read_op(lambda info: {})
        if topic.config.logged:
            log_lease(self.stager, topic, msg.seq, DEAD_LETTERED, Lease("", 0, 0),
                              state.deliveries.get(msg.seq, 0))
        self.stager.batch.undo_fns.append(lambda: self.outbox.add((msg.topic, msg.seq)))

        def publish(info: CommitInfo) -> dict:
            if msg.seq in state.moving:
                self._gone(topic, state, [msg.seq])
            return {}
        return topic.config.logged, publish

    def _append(self, topic: TopicState, seq: int) -> Append:
        """The job as the dead-letter topic gets it: same data, tag and node; its meta (an
        object, else {}) plus where it came from, as strings. The key names the job (the
        queue's id, the seq and the record's time), so a resend is deduplicated."""
        rec = self.reader.read(topic, seq)
        data, meta_text = split(rec.envelope, has_meta(rec.flags))
        meta = orjson.loads(meta_text) if meta_text is not None else None
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta.update({"$dead_letter_from": topic.name,
                     "$dead_letter_deliveries": str(topic.config.max_deliveries),
                     "$dead_letter_src_seq": str(seq)})
        record = [bytes(data), rec.tag, rec.node, orjson.dumps(meta)]
        return Append(topic.config.dead_letter, [record],
                      idempotency_key=f"dead-letter:{topic.tid:016x}:{seq}:{rec.ts}",
                      create=True, return_seqs=False)
