"""Record deletes, queue acks and queue lease events on replicated topics (ledger/op_log.py
for the rules): the leader logs one as an op, its followers fetch and log it, and every
replica applies it (the same Delete or Lease frames a single node logs, plus an OPS_COMMIT
frame) only once every in-sync replica holds it. The leader answers the request after
applying it. Lease events are the leader's already (its claim, nack or extend changed its
leases and logged them when made), so only followers apply them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from topics_actors.cluster.isr_tracker import IsrTracker
from topics_actors.errors import TopicsError, invalid
from topics_actors.ledger import delete_rules
from topics_actors.ledger.op_log import Op, OpLog, bound_of
from topics_actors.ledger.queue_state import queue_of
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import DeleteRecords
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Op as StagedOp, write_op
from topics_actors.shard.record_reader import RecordReader
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType

OPS_PER_FETCH = 1_000


class AwaitOp(NamedTuple):
    """A delete's (or an ack's) reply held until its op is applied; `reply(deleted)` makes
    it (None: the delete's own)."""
    topic: str
    no: int
    reply: Callable[[int], dict] | None = None


class ReplicaOps:
    def __init__(self, stager: BatchStager, reader: RecordReader, release):
        """`release(peer, corr, t0_ns, body, error)`: hand an answer to the shell."""
        self.stager = stager
        self.reader = reader
        self.release = release
        self.waiting: dict[tuple[str, int], tuple[bytes, int, int]] = {}

    # --- the leader --------------------------------------------------------------------------

    def request(self, msg: DeleteRecords, topic: TopicState, epoch: int,
                tracker: IsrTracker, on_durable: Callable[[], None]):
        """Log the delete as the topic's next op; its reply waits for the apply."""
        if msg.before_seq is None and msg.match is None:
            raise invalid("a delete needs before_seq and/or match")
        if msg.before_seq is not None and msg.before_seq < 0:
            raise invalid("before_seq must not be negative")
        match = delete_rules.parse_match(msg.match)
        tracker.require_min_isr("a replicated delete")
        self.stager.throttle()
        # Only records every in-sync replica holds: a failover never puts another record
        # at a seq a delete named.
        body = ["delete", msg.before_seq, list(match) if match else None, topic.visible + 1]
        return self.log(topic, epoch, body, on_durable,
                        lambda no, _info: AwaitOp(topic.name, no))

    def log(self, topic: TopicState, epoch: int, body: list, on_durable: Callable[[], None],
            held: Callable[[int, CommitInfo], object]):
        """Stage `body` as the topic's next op; after the commit `held(op number, info)` is
        the request's answer (an AwaitOp, or one carrying more)."""
        ops = ops_of(topic)
        op = Op(ops.leo, epoch, body)
        self.stager.save_undo(topic.name, topic)
        self.stager.frame(FrameType.REPL_OP, topic, frame_body.encode_op(epoch, body),
                          seq=op.no, sync=topic.config.durability.acks_after_fsync)
        ops.append(op)
        self.stager.batch.undo_fns.append(lambda: _unappend(ops, op))

        def publish(info: CommitInfo):
            on_durable()
            return held(op.no, info)
        return write_op(publish)

    def hold(self, peer: bytes, corr: int, t0_ns: int, held: AwaitOp) -> bool:
        """Keep the reply until its op is applied (the leader checked that it is not yet:
        leader_duties.hold_op)."""
        self.waiting[(held.topic, held.no)] = (peer, corr, t0_ns, held.reply)
        return True

    def apply_committed(self, topic: TopicState, upto: int) -> None:
        """Stage the apply of the topic's ops committed up to `upto` as an operation of the
        shard's own (committed with the next batch); their waiting replies go out then."""
        log_state = ops_of(topic).snapshot()
        ops = ops_of(topic).take_committed(upto)
        if not ops:
            return
        self._undo(topic, log_state)
        applied = self._apply_ops(topic, ops, own=True)

        def publish(info: CommitInfo) -> dict:
            for op, gone in zip(ops, applied(info)):
                waiter = self.waiting.pop((topic.name, op.no), None)
                if waiter is not None:
                    peer, corr, t0_ns, reply = waiter
                    body = reply(gone) if reply is not None else _reply(topic, gone)
                    self.release(peer, corr, t0_ns, {**body, "performance": {}}, None)
            return {}
        self.stager.add(StagedOp(b"", 0, 0, True, publish))

    def drop_waiters(self, name: str, error: TopicsError) -> None:
        """Leadership moved: the deletes waiting are in doubt."""
        for key in [k for k in self.waiting if k[0] == name]:
            peer, corr, t0_ns, _reply_fn = self.waiting.pop(key)
            self.release(peer, corr, t0_ns, None, error)

    def answer(self, topic: TopicState, ops_leo: int, ops_epoch: int | None,
               tracker: IsrTracker) -> dict:
        """The op part of a fetch answer, for a follower whose op log ends at `ops_leo`
        with an op of `ops_epoch`: ops to append, the commit point, or what to drop."""
        ops = ops_of(topic)
        if ops_epoch is not None and ops.epoch_of(ops_leo - 1) != ops_epoch:
            return {"ops_drop": True, "ops_hw": tracker.ops_hw}
        found = ops.since(ops_leo, OPS_PER_FETCH)
        if found is None:
            return {"ops_reset": True}
        return {"ops": [[op.no, op.epoch, op.body] for op in found],
                "ops_hw": tracker.ops_hw}

    # --- a follower --------------------------------------------------------------------------

    def take(self, topic: TopicState, body: dict, log_end: int) -> Callable | None:
        """Stage the op part of a fetch answer: drop, append, and apply what is committed
        and whose records this replica holds (`log_end`); the publish of the applies."""
        ops = ops_of(topic)
        self._undo(topic, ops.snapshot())
        sync = topic.config.durability.acks_after_fsync
        if body.get("ops_drop") and ops.pending:
            self.stager.frame(FrameType.OPS_DROP, topic, frame_body.encode_u64(ops.applied),
                              seq=ops.applied, sync=sync)
            ops.drop_pending()
        for no, epoch, op_body in body.get("ops", ()):
            if no == ops.leo:
                self.stager.frame(FrameType.REPL_OP, topic,
                                  frame_body.encode_op(epoch, op_body), seq=no, sync=sync)
                ops.append(Op(no, epoch, list(op_body)))
        upto = ops.applied
        for op in ops.pending:
            if op.no > body.get("ops_hw", 0) or bound_of(op.body) > log_end:
                break
            upto = op.no
        applied = ops.take_committed(upto)
        return self._apply_ops(topic, applied, own=False) if applied else None

    # --- both ---------------------------------------------------------------------------------

    def _undo(self, topic: TopicState, state) -> None:
        """Should the batch fail, the op log goes back to `state`: ops counted applied
        whose Delete frames were never written would leave their records in place."""
        ops = ops_of(topic)
        self.stager.batch.undo_fns.append(lambda: ops.restore(state))

    def _apply_ops(self, topic: TopicState, ops: list[Op],
                     own: bool) -> Callable[[CommitInfo], list]:
        """Stage what applies `ops`: the Delete frames of deletes and acks; the Lease frames
        of lease events, on a follower (`own`: the leader, whose claims, nacks and extends
        logged them and changed its leases when they were made)."""
        sync = topic.config.durability.acks_after_fsync
        for op in ops:
            if op.body[0] != "leases":
                self.stager.frame(FrameType.DELETE, topic, frame_body.encode_delete(
                    _delete_body(op.body)), sync=sync)
            elif not own:
                for seq, event, lease_id, deadline, deliveries, node in op.body[1]:
                    self.stager.frame(FrameType.LEASE, topic, frame_body.encode_lease(
                        frame_body.LeaseBody(event, lease_id, deadline, deliveries, node)),
                        seq=seq, sync=sync)
        self.stager.frame(FrameType.OPS_COMMIT, topic, frame_body.encode_u64(0),
                          seq=ops[-1].no, sync=sync)

        def applied(_info: CommitInfo) -> list[int]:
            return [self._apply(topic, op.body, own) for op in ops]
        return applied

    def _apply(self, topic: TopicState, body: list, own: bool) -> int:
        if body[0] == "leases":
            if not own:
                state = queue_of(topic)
                for seq, event, lease_id, deadline, deliveries, node in body[1]:
                    state.apply_frame(seq, event, lease_id, deadline, deliveries, node, True)
            return 0
        if body[0] == "seqs":
            gone = delete_rules.delete_seqs(topic, self.reader.read, body[1],
                                            TopicState.delete_one)
            if topic.queue is not None:
                topic.queue.left(body[1])
            return gone
        _, before, match, bound = body
        return delete_rules.apply(topic, self.reader.read, before,
                                  tuple(match) if match else None, bound,
                                  TopicState.delete_one, indexed=True)


def _delete_body(body: list) -> frame_body.DeleteBody:
    """The Delete frame that applies an op (a single node's frame for the same delete)."""
    if body[0] == "seqs":
        return frame_body.DeleteBody(None, None, tuple(body[1]), None)
    _, before, match, bound = body
    return frame_body.DeleteBody(before, tuple(match) if match else None, (), bound)


def ops_of(topic: TopicState) -> OpLog:
    if topic.ops is None:
        topic.ops = OpLog()
    return topic.ops


def _unappend(ops: OpLog, op: Op) -> None:
    if ops.pending and ops.pending[-1] is op:
        ops.pending.pop()


def _reply(topic: TopicState, gone: int) -> dict:
    return {"topic": topic.name, "deleted": gone, "earliest_seq": topic.earliest_seq(),
            "head_seq": topic.visible, "count": topic.count, "bytes": topic.bytes,
            "performance": {}}
