"""Queue requests in a shard's batch: claim, ack, nack, extend (spec/api.md 8); the rules
of the lease state are ledger/queue_state.py.

The lease state changes when a request is staged, so later requests of the same batch see
it (a job claimed is not claimed twice in one batch), and an undo entry puts it back if the
batch fails. What is logged, with the topic's class (spec/storage.md 1.3, Lease frames):
acks and dead-letter moves always (a job once acked never comes back), claims, nacks and
extends only with `leases_durable`. A request that staged a frame is a write: when its
batch cannot commit it fails and its lease changes are undone (fail closed). One that
staged nothing (memory-only leases) is a read: its leases stand whatever the batch does.

A job claimed more than `max_deliveries` times moves to the topic's `dead_letter` topic
instead (shard/queues/dead_letter_moves.py).

On a replicated queue's leader (docs/CLUSTER.md 7) an ack is an op of the topic's op log
(its jobs are deleted on every replica once all in-sync ones hold it), and so are the lease
events of claims, nacks and extends when the queue has `leases_durable`: the request is
answered when its op is applied, so a new leader knows every lease it answered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from topics_actors.errors import ErrorCode, TopicsError, invalid, topic_not_found
from topics_actors.ledger import delete_rules
from topics_actors.ledger.retention_rules import record_size
from topics_actors.ledger.queue_state import (
    ACKED, CLAIMED, EXTENDED, RELEASED, Lease, QueueState, counters, known_jobs, live_jobs,
    parse_lease_id, queue_of, render_lease_id,
)
from topics_actors.ledger.topic_state import TopicState
from topics_actors.limits import CLAIM_MAX, NACK_DELAY_MS_MAX, NODE_BYTES_MAX, QUEUE_SEQS_MAX
from topics_actors.protocol.messages import Ack, Claim, Extend, Held, Nack
from topics_actors.record_envelope import has_meta
from topics_actors.shard import retention
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, read_op
from topics_actors.shard.queues.claim_windows import (
    PASS_GRACE_MS, ClaimPass, ClaimWindows, Member,
)
from topics_actors.shard.queues.dead_letter_moves import DeadLetterMoves, log_lease
from topics_actors.shard.long_poll import Park
from topics_actors.shard.record_append import RecordAppend
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.topic_config import LEASE_MS_MAX, LEASE_MS_MIN


class QueueReplication(Protocol):
    """What a cluster node's leader does for queues (shard/replication/leader_duties.py)."""

    def queue_replicated(self, name: str, what: str) -> bool: ...

    def log_queue_op(self, topic: TopicState, body: list,
                     answer: Callable[[CommitInfo], dict]) -> Staged: ...


def _clamp_lease(lease_ms: int) -> int:
    return max(LEASE_MS_MIN, min(LEASE_MS_MAX, lease_ms))


def _check_node(node: object) -> str:
    if not isinstance(node, str) or not node:
        raise invalid("node must be a non-empty string")
    if len(node.encode()) > NODE_BYTES_MAX:
        raise invalid(f"node is longer than {NODE_BYTES_MAX} bytes")
    return node


def _uint(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(f"{what} must be a non-negative integer")
    return value


def holder_args(node: object, seqs: list, lease_ids: list | None
                ) -> tuple[str, list[int], list[int | None]]:
    """The checks of ack, nack and extend, in the contract's order: node, batch size,
    lease_ids length and form. Returns (node, seqs, fence per seq: None = no fence)."""
    node = _check_node(node)
    if len(seqs) > QUEUE_SEQS_MAX:
        raise TopicsError(f"at most {QUEUE_SEQS_MAX} seqs per request",
                          ErrorCode.BATCH_TOO_LARGE, {"seqs": len(seqs), "max": QUEUE_SEQS_MAX})
    seqs = [_uint(seq, "a seq") for seq in seqs]
    lease_ids = lease_ids or []
    if lease_ids and len(lease_ids) != len(seqs):
        raise invalid("lease_ids must be empty or as long as seqs")
    try:
        fences = [parse_lease_id(t) if isinstance(t, str) else parse_lease_id("-")
                  for t in lease_ids]
    except ValueError:
        raise invalid("every lease id must be lease_<hex> or empty") from None
    return node, seqs, fences or [None] * len(seqs)


class QueueOps:
    def __init__(self, stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
                 appends: RecordAppend):
        self.stager = stager
        self.registry = registry
        self.reader = reader
        self.moves = DeadLetterMoves(stager, registry, reader, appends)
        self.windows = ClaimWindows()
        self.replication: QueueReplication | None = None   # a cluster node's (ShardCore)
        self._counted_for: CommitInfo | None = None
        self._counted: dict[str, dict] = {}

    def _queue(self, name: str) -> tuple[TopicState, QueueState]:
        topic = self.registry.get(name)
        if topic is None:
            raise topic_not_found(name)
        if topic.config.type != "queue":
            raise TopicsError(f"topic {name!r} is not a queue", ErrorCode.NOT_A_QUEUE,
                              {"topic": name})
        state = queue_of(topic)
        state.sweep(self.stager.clock())
        return topic, state

    def _counters(self, topic: TopicState, info: CommitInfo) -> dict:
        """The queue's figures for a reply of the commit `info`: counted once per commit and
        topic (they walk every lease), the same for every answer of that commit."""
        if self._counted_for is not info:
            self._counted_for, self._counted = info, {}
        found = self._counted.get(topic.name)
        if found is None:
            found = self._counted[topic.name] = counters(topic, self.stager.clock())
        return found

    def _replicated(self, topic: TopicState, what: str) -> bool:
        """Whether this queue's acks (and durable lease events) go through its op log;
        raises not_enough_replicas, before anything is staged, under min_isr."""
        replication = self.replication
        return replication is not None and replication.queue_replicated(topic.name, what)

    def _lease_events(self, topic: TopicState, what: str) -> list | None:
        """A list collecting the lease events of a replicated queue with durable leases
        (they become an op, so a new leader knows who holds what); None otherwise."""
        if topic.config.leases_durable and self._replicated(topic, what):
            return []
        return None

    def _logged(self, topic: TopicState, events: list | None, writes: bool, answer) -> Staged:
        """The request's staged form: its lease events as an op whose apply answers it
        (`answer(info)` of its own commit), or its own commit's answer."""
        if events:
            return self.replication.log_queue_op(topic, ["leases", events], answer)
        return writes, answer

    # --- claim ------------------------------------------------------------------------------

    def claim(self, msg: Claim) -> Staged:
        self.stager.throttle()
        topic, state = self._queue(msg.topic)
        member = Member(_check_node(msg.node), max(1, min(CLAIM_MAX, _uint(msg.max, "max"))),
                        None if msg.lease_ms is None else _uint(msg.lease_ms, "lease_ms"))
        jitter_ms = topic.config.claim_jitter_ms
        if jitter_ms > 0:      # never with replicated leases (topic_config refuses it)
            key = self.windows.join(topic.name, jitter_ms, self.stager.clock(), member)
            return read_op(lambda info: Park(key, jitter_ms + PASS_GRACE_MS, member.answer))
        events = self._lease_events(topic, "a replicated claim")
        writes, answers = self._deal(topic, state, [member], events)
        return self._logged(topic, events, writes, lambda info: answers(info)[0])

    def claim_pass(self, msg: ClaimPass) -> Staged:
        """A claim window is due: one pass for all its claims, then wake them."""
        window = self.windows.take(msg.topic)
        if window is None:
            return read_op(lambda info: {})
        try:
            self.stager.throttle()
            topic, state = self._queue(msg.topic)
        except TopicsError as error:
            return read_op(_refusal(window, error))
        writes, answers = self._deal(topic, state, window.members)

        def answer(info: CommitInfo) -> dict:
            for member, reply in zip(window.members, answers(info)):
                member.result = reply
            info.woken.add(window.key)
            return {}
        return writes, answer

    def _deal(self, topic: TopicState, state: QueueState, members: list[Member],
              events: list | None = None):
        """Lease ready jobs to `members`, one at a time round-robin while they want more;
        jobs past max_deliveries are moved instead. Returns (writes, the function giving
        each member's reply after the commit); the claims' lease events go to `events`."""
        config, now = topic.config, self.stager.clock()
        retention.plan(self.stager, self.reader, topic)
        state.cursor = max(state.cursor, topic.earliest_seq())
        state.prune(topic.count, known_jobs(topic))
        deadlines = [now + _clamp_lease(config.lease_ms if m.lease_ms is None else m.lease_ms)
                     for m in members]
        shares: list[list[tuple[int, Lease]]] = [[] for _ in members]
        claimed, moving, turn = [], [], 0
        left = sum(m.want for m in members)
        mover = self._dead_letter(topic)
        records: dict = {}          # read once: to tell a live job, then for its reply
        for seq in state.candidates(topic.visible, live_jobs(topic, self.reader.read, records)):
            if mover is not None and state.deliveries.get(seq, 0) >= config.max_deliveries:
                moving.append(seq)
                continue
            while len(shares[turn]) >= members[turn].want:
                turn = (turn + 1) % len(members)
            lease = state.lease(seq, members[turn].node, deadlines[turn],
                                size=record_size(records[seq]))
            shares[turn].append((seq, lease))
            claimed.append((seq, lease))
            turn, left = (turn + 1) % len(members), left - 1
            if not left:
                break
        durable = config.logged and config.leases_durable
        if durable:
            for seq, lease in claimed:
                log_lease(self.stager, topic, seq, CLAIMED, lease, state.deliveries[seq],
                                  events)
        staged, undo_moves, publish_moves = self.moves.move(topic, state, moving)
        writes = staged or (durable and bool(claimed))
        if writes:
            self.stager.batch.undo_fns.append(lambda: _unclaim(state, claimed, undo_moves))

        def answers(info: CommitInfo) -> list[dict]:
            publish_moves(info)
            ready = self._counters(topic, info)["ready"]
            return [_claim_reply(topic.name, share, records, state, ready) for share in shares]
        return writes, answers

    def _dead_letter(self, topic: TopicState) -> str | None:
        """Where jobs past max_deliveries go; None: they are delivered again."""
        config = topic.config
        return config.dead_letter if config.max_deliveries else None

    # --- holders ----------------------------------------------------------------------------

    def _held(self, args: tuple, topic: TopicState, state: QueueState, event: int, change,
              logged: bool = True, events: list | None = None):
        """Apply `change(seq, lease)` to every seq the node holds (fenced; `args` are
        holder_args' (node, seqs, fences)); stage its
        Lease frame when `event` is logged (never when not `logged`; its event also goes
        to `events`); an undo entry restores the leases. Returns (seqs done, seqs skipped,
        whether frames were staged)."""
        node, seqs, fences = args
        done, skipped, undo = [], [], []
        config = topic.config
        log = logged and config.logged and (event == ACKED or config.leases_durable)
        for seq, fence in zip(seqs, fences):
            lease = state.held(seq, node, fence)
            if lease is None:
                skipped.append(seq)
                continue
            undo.append((seq, lease, state.deliveries.get(seq, 0)))
            frame_lease = change(seq, lease)
            done.append(seq)
            if log:
                log_lease(self.stager, topic, seq, event, frame_lease, undo[-1][2],
                                  events)
        if undo:
            self.stager.batch.undo_fns.append(lambda: _restore(state, undo))
        return done, skipped, log and bool(done)

    def ack(self, msg: Ack) -> Staged:
        self.stager.throttle()
        args = holder_args(msg.node, msg.seqs, msg.lease_ids)
        topic, state = self._queue(msg.topic)
        if self._replicated(topic, "a replicated ack"):
            return self._ack_replicated(args, topic, state)
        sized: list[tuple[int, int]] = []    # (seq, payload bytes): deleted without a read

        def leave(seq: int, lease: Lease) -> Lease:
            state.leave(seq)
            sized.append((seq, lease.size))
            return lease
        acked, skipped, writes = self._held(args, topic, state, ACKED, leave)

        def answer(info: CommitInfo) -> dict:
            delete_rules.delete_jobs(topic, self.reader.read, sized, TopicState.delete_one)
            state.left(acked)
            return self._holder_reply(topic, "acked", acked, skipped, info)
        return writes, answer

    def _ack_replicated(self, args: tuple, topic: TopicState, state: QueueState) -> Staged:
        """An ack on a replicated queue (its leader): the leases go here and now; the jobs'
        records are deleted by an op of the topic's op log (shard/replication/
        replica_ops.py), on every replica once all in-sync ones hold it, and the reply
        waits for that."""
        acked, skipped, _ = self._held(args, topic, state, ACKED,
                                       lambda seq, lease: state.leave(seq) or lease,
                                       logged=False)

        def reply(info: CommitInfo | None = None) -> dict:
            return self._holder_reply(topic, "acked", acked, skipped, info)
        if not acked:
            return read_op(reply)
        return self.replication.log_queue_op(topic, ["seqs", acked], reply)

    def nack(self, msg: Nack) -> Staged:
        self.stager.throttle()
        args = holder_args(msg.node, msg.seqs, msg.lease_ids)
        delay_ms = min(NACK_DELAY_MS_MAX, _uint(msg.delay_ms, "delay_ms"))
        topic, state = self._queue(msg.topic)
        ready_at = self.stager.clock() + delay_ms if delay_ms else 0
        events = self._lease_events(topic, "a replicated nack")

        def release(seq: int, lease: Lease) -> Lease:
            state.release(seq, ready_at)
            return Lease(lease.node, lease.lease_id, ready_at)
        nacked, skipped, writes = self._held(args, topic, state, RELEASED, release,
                                             events=events)
        return self._logged(topic, events, writes,
                            lambda info: self._holder_reply(topic, "nacked", nacked, skipped,
                                                            info))

    def extend(self, msg: Extend) -> Staged:
        self.stager.throttle()
        args = holder_args(msg.node, msg.seqs, msg.lease_ids)
        deadline = self.stager.clock() + _clamp_lease(_uint(msg.lease_ms, "lease_ms"))
        topic, state = self._queue(msg.topic)
        events = self._lease_events(topic, "a replicated extend")

        def extend(seq: int, lease: Lease) -> Lease:
            state.extend(seq, lease, deadline)
            return state.leases[seq]
        extended, skipped, writes = self._held(args, topic, state, EXTENDED, extend,
                                               events=events)
        return self._logged(topic, events, writes, lambda info: {
            "topic": topic.name, "extended": len(extended), "extended_seqs": extended,
            "skipped": skipped, "deadlines": {str(seq): deadline for seq in extended}})

    def _holder_reply(self, topic: TopicState, done: str, seqs: list[int],
                      skipped: list[int], info: CommitInfo | None) -> dict:
        """An ack's or nack's reply: the reference's count under `acked`/`nacked` (its
        src/types.rs), the seqs themselves under `acked_seqs`/`nacked_seqs`."""
        queue = (counters(topic, self.stager.clock()) if info is None
                 else self._counters(topic, info))
        return {"topic": topic.name, done: len(seqs), done + "_seqs": seqs,
                "skipped": skipped, "ready": queue["ready"], "in_flight": queue["in_flight"]}

    def held(self, msg: Held) -> Staged:
        """Which of `seqs` `node` still holds (a `/work` stream's live leases): a read,
        answered after the batch's commit, so an ack staged before it in the batch counts."""
        topic, state = self._queue(msg.topic)
        node, seqs, fences = holder_args(msg.node, msg.seqs, msg.lease_ids)
        return read_op(lambda info: {
            "topic": topic.name,
            "held": [seq for seq, fence in zip(seqs, fences) if state.held(seq, node, fence)]})


def _unclaim(state: QueueState, claimed: list, undo_moves) -> None:
    for seq, lease in reversed(claimed):
        state.unlease(seq, lease)
    undo_moves()


def _restore(state: QueueState, undo: list) -> None:
    for seq, lease, deliveries in reversed(undo):
        state.restore(seq, lease)
        if deliveries:
            state.deliveries[seq] = deliveries


def _refusal(window, error: TopicsError):
    """A window's claims share the refusal of its pass (the queue is gone, or full)."""
    def refuse(info: CommitInfo) -> dict:
        for member in window.members:
            member.error = error
        info.woken.add(window.key)
        return {}
    return refuse


def _claim_reply(name: str, share: list, records: dict, state: QueueState, ready: int) -> dict:
    jobs = [[seq, render_lease_id(lease.lease_id), lease.deadline, records[seq].ts,
             records[seq].envelope, records[seq].tag, state.deliveries.get(seq, 1),
             has_meta(records[seq].flags)]
            for seq, lease in share]
    return {"topic": name, "claimed": jobs, "count": len(jobs), "ready": ready}
