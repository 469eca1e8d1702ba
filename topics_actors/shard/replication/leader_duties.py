"""The leader's side of replication in a shard (docs/CLUSTER.md): for each topic it leads,
it answers its followers' fetches and epoch queries, tracks their durable progress
(cluster/isr_tracker.py), raises the high watermark, answers `acks: all` writes once the
watermark covers them, logs and applies replicated deletes and queue events (ops), and
proposes ISR changes (IsrChange, written by its supervisor with a compare-and-swap).
Readers of a replicated topic never see a seq above its high watermark (TopicState.visible).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from topics_actors.cluster.isr_tracker import AckWaiters, IsrTracker
from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import Append, DeleteRecords
from topics_actors.shard.batch_stager import BatchStager, Staged
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication.replica import Leadership, Released, Replicas
from topics_actors.shard.replication.replica_keys import KeyTrail
from topics_actors.shard.replication.replica_ops import AwaitOp, ReplicaOps, ops_of
from topics_actors.shard.replication.replica_role import Role
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import Acks

log = logging.getLogger(__name__)

LAG_TIME_MS = 10_000          # a follower not caught up this long leaves the ISR
ACK_WAITERS_MAX = 100_000     # `acks: all` writes waiting for the watermark, per topic
FETCH_PREFIX = "\0r"          # parked fetches wait under this + topic (not a reader's wake)


class AwaitHw(NamedTuple):
    """An `acks: all` reply held until the high watermark covers `last_seq`."""
    topic: str
    last_seq: int
    body: dict


class LeaderDuties:
    def __init__(self, node_id: str, replicas: Replicas, stager: BatchStager,
                 registry: TopicRegistry, reader: RecordReader, ops: ReplicaOps, clock_ms):
        self.node_id = node_id
        self.replicas = replicas
        self.stager, self.registry, self.reader = stager, registry, reader
        self.ops = ops
        self.clock_ms = clock_ms
        self.fenced = False            # our ZooKeeper session is not connected
        self.leader_changes = 0
        self.pads: list[tuple[TopicState, int]] = []   # heads padded when the roles commit

    # --- leading starts and stops (the roles from the supervisor) -----------------------------

    def begin(self, role: Role, topic: TopicState) -> None:
        """Lead `topic` as `role` says: a new leader epoch starts a new tracker (its start
        logged as an EPOCH frame); the same epoch takes a new ISR or replica set."""
        lead = self.replicas.lead(role.topic)
        if lead is None and unsettled(topic, role.leader_epoch):
            log.warning("event=lead_deferred topic=%s leader_epoch=%d reason=recovered_in_it",
                        role.topic, role.leader_epoch)
            return                # its supervisor reports it; the controller starts an epoch
        if lead is None or lead.leader_epoch != role.leader_epoch:
            tracker = self._new_tracker(role, topic)
            if lead is None:        # a leader that stays across epochs keeps its waiters
                keys = KeyTrail.seeded(topic) if len(role.replicas) > 1 else None
                lead = Leadership(tracker, AckWaiters(ACK_WAITERS_MAX), keys)
                self.replicas.start_leading(role.topic, lead)
            else:
                lead.new_epoch(tracker)
            self.leader_changes += 1
            log.info("event=leading topic=%s leader_epoch=%d isr=%s leo=%d", role.topic,
                     role.leader_epoch, ",".join(role.isr), topic.head + 1)
            self.advance(topic, tracker.leader_committed(topic.head + 1))
            # Its predecessor's ops it holds commit as its records do: alone in the ISR it
            # must not wait for a fetch that never comes (predecessor_ops until then)
            tracker.leader_ops_durable(ops_of(topic).leo)
        else:
            self.advance(topic, lead.same_epoch(role.replicas, topic.config.min_isr, role.isr,
                                                self.clock_ms(), lambda: KeyTrail.seeded(topic)))
        self.ops_moved(topic)

    def _new_tracker(self, role: Role, topic: TopicState) -> IsrTracker:
        start = topic.next_seq
        if topic.epochs.latest != role.leader_epoch:
            if topic.epochs.latest is not None and role.leader_epoch < topic.epochs.latest:
                raise InvariantViolation(f"leader epoch {role.leader_epoch} of {topic.name!r} "
                                         f"below its latest {topic.epochs.latest}")
            # The epoch's start is durable before the epoch's first record (same batch,
            # earlier in it): a recovery rebuilds the cache from these frames.
            self.stager.save_undo(topic.name, topic)
            self.stager.frame(FrameType.EPOCH, topic, frame_body.encode_u64(role.leader_epoch),
                              seq=start)
            topic.epochs.assign(role.leader_epoch, start)
            self._settle_reservation(topic)
        topic.unsettled_epoch = None
        tracker = IsrTracker(self.node_id, role.replicas, role.isr, topic.config.min_isr,
                             LAG_TIME_MS, topic.epochs.entries()[-1][1], topic.head + 1,
                             (topic.hw or 0) + 1, self.clock_ms(), role.leader_epoch)
        ops = ops_of(topic)
        tracker.start_ops(ops.leo, ops.applied)
        if not topic.config.leases_durable:
            topic.queue = None  # memory-only leases are a leader's alone: a new leader
                                # starts with every job ready (a held job may come again)
        return tracker

    def stop(self, name: str) -> None:
        """No longer lead `name`: the `acks: all` writes and ops waiting are in doubt."""
        lead = self.replicas.stop_leading(name)
        if lead is None:
            return
        error = self.in_doubt(name)
        for peer, corr, t0, _body in lead.drain():
            self.replicas.release(Released(peer, corr, t0, None, error))
        self.ops.drop_waiters(name, error)

    def in_doubt(self, name: str) -> TopicsError:
        """The answer to a write whose leadership here ended before every in-sync replica
        had it: not_leader naming the new leader, in doubt (resent with its key there)."""
        role = self.replicas.role(name)
        return TopicsError(f"leadership of {name!r} moved before the write was on every "
                           f"in-sync replica: it may or may not survive", ErrorCode.NOT_LEADER,
                           {**(role.hint() if role else {"topic": name}), "in_doubt": True})

    # --- requests ----------------------------------------------------------------------------

    def check_append(self, msg: Append) -> bool:
        """Whether the append waits for the watermark (`acks: all`; and in every ack mode
        while this node is cut off from ZooKeeper, when another node may lead already: its
        answer waits for the session to come back, and if leadership moved meanwhile it is
        answered in doubt; and while a move takes this copy away, so that handing
        leadership over cuts no acknowledged write); raises when it cannot be taken
        here."""
        acks = Acks.of(msg.acks)
        lead = self.replicas.lead(msg.topic)
        if lead is None:
            self.check_led(msg.topic)
            return False
        if len(lead.tracker.replicas) == 1:
            return False
        if acks is not Acks.ALL:
            return self.fenced or self.replicas.role(msg.topic).leaving(self.node_id)
        lead.tracker.require_min_isr("that acks=all")
        return True

    def _settle_reservation(self, topic: TopicState) -> None:
        """A copy holding a head reservation above its head (recovered after a crash, or
        taken while following) never issues those seqs again: its head jumps past them,
        after the new epoch's start, so a follower holding records there (the old leader's,
        lost here by a power loss) cuts them as the epoch's end tells it."""
        reserved = topic.reserved_head
        if not topic.config.durability.reserves_head or reserved <= topic.head:
            return
        self.stager.frame(FrameType.HEAD_WATERMARK, topic, frame_body.encode_u64(reserved),
                          seq=reserved)
        topic.next_seq = reserved + 1
        self.pads.append((topic, reserved))
        log.info("event=reservation_settled topic=%s head=%d padded_to=%d", topic.name,
                 topic.head, reserved)

    def check_led(self, name: str) -> None:
        """Refuse a request for a replicated topic this node does not lead: not_leader with
        where it is led (the gateway and the client follow it); not_ready while this node
        is its leader but waits for a new epoch (it recovered in the current one)."""
        role = self.replicas.role(name)
        if role is None:
            return
        lead = self.replicas.lead(name)
        if lead is not None:
            self._check_settled(name, lead)
            return
        if role.leader == self.node_id:
            raise TopicsError(f"the copy of {name!r} here recovered in leader epoch "
                              f"{role.leader_epoch}; it leads again in the next",
                              ErrorCode.NOT_READY, {"reason": "leader_epoch_wanted"})
        raise TopicsError(f"topic {name!r} is led by node {role.leader!r}"
                          if role.leader else f"topic {name!r} has no leader now",
                          ErrorCode.NOT_LEADER, role.hint())

    def _check_settled(self, name: str, lead: Leadership) -> None:
        """A new leader serves a topic only once its predecessor's ops are applied here (a
        new Raft leader's rule): a follower learns that an op is committed from its next
        fetch, so a delete or an ack the old leader applied and answered may still be
        pending here, and a read would show the deleted record, a claim hand out the acked
        job. Appends pass (they name no record); the ops commit with the first fetches."""
        topic = self.registry.get(name)
        ops = topic.ops if topic is not None else None
        if ops is not None and ops.pending and ops.pending[0].epoch < lead.leader_epoch:
            raise TopicsError(f"the new leader of {name!r} applies its predecessor's "
                              f"deletes and acks first", ErrorCode.NOT_READY,
                              {"reason": "predecessor_ops"})

    def note_key(self, name: str, key: str | None) -> None:
        """An append to `name` with `key` was staged here: a new write's key joins the
        trail its followers fetch it from (replica_keys.py)."""
        lead = self.replicas.lead(name)
        topic = self.registry.get(name)
        if key is None or lead is None or lead.keys is None or topic is None:
            return
        entry = topic.dedupe.lookup(key, self.stager.clock(),
                                    topic.config.idempotency_window_ms)
        if entry is not None:
            lead.keys.add(key, entry.first_seq, entry.last_seq)

    def hold(self, peer: bytes, corr: int, t0_ns: int, held: AwaitHw) -> bool:
        """Keep an `acks: all` reply until the watermark covers it; False: answer now. A
        write staged in the batch whose roles ended this leadership (a move's handoff) is in
        doubt: its waiters were answered already, and no follower raises the watermark here
        any more (its copy may be gone with the roles: answering it then lost the write)."""
        lead = self.replicas.lead(held.topic)
        if lead is None:
            raise self.in_doubt(held.topic)
        topic = self.registry.get(held.topic)
        if topic is None:
            raise InvariantViolation(f"{held.topic!r} is led here without a copy")
        if topic.visible >= held.last_seq:
            return False
        if held.last_seq > topic.head:
            raise InvariantViolation(f"an acks=all write of {held.topic!r} waits for seq "
                                     f"{held.last_seq}, past the log's head {topic.head}")
        if not lead.hold(held.last_seq, (peer, corr, t0_ns, held.body)):
            raise TopicsError("too many writes wait for replication; retry",
                              ErrorCode.THROTTLED, {"retry_after_ms": 100})
        return True

    def hold_op(self, peer: bytes, corr: int, t0_ns: int, held: AwaitOp) -> bool:
        """Keep a replicated op's reply (a delete, a queue's ack) until the op is applied;
        False: answer now. Staged in the batch that ended this leadership, it is in doubt
        (as in `hold`): nothing would apply it here and answer it."""
        topic = self.registry.get(held.topic)
        ops = topic.ops if topic is not None else None
        if ops is not None and ops.applied >= held.no:
            return False
        if self.replicas.lead(held.topic) is None:
            raise self.in_doubt(held.topic)
        return self.ops.hold(peer, corr, t0_ns, held)

    def committed(self, woken: set[str]) -> None:
        """After a commit: the leader's own log end is durable for the topics it woke."""
        for name in woken:
            lead = self.replicas.lead(name)
            topic = self.registry.get(name)
            if lead is not None and topic is not None:
                self.advance(topic, lead.tracker.leader_committed(topic.head + 1))

    # --- ops: replicated deletes and queue events (replica_ops.py) ----------------------------

    def queue_replicated(self, name: str, what: str) -> bool:
        """Whether a queue request on `name` goes through its op log (this node leads a
        topic of several copies); raises not_enough_replicas under min_isr, before the
        request stages anything."""
        role, lead = self.replicas.role(name), self.replicas.lead(name)
        if role is None or len(role.replicas) < 2 or lead is None:
            return False
        lead.tracker.require_min_isr(what)
        return True

    def log_queue_op(self, topic: TopicState, body: list, answer) -> Staged:
        """A replicated queue's ack or lease events (queue_ops.py): its op, answered by
        `answer(info)` (info: the commit that logged it) once applied."""
        lead = self.replicas.lead(topic.name)
        return self.ops.log(topic, lead.leader_epoch, body,
                            lambda: self._ops_durable(topic),
                            lambda no, info: AwaitOp(topic.name, no,
                                                     lambda _gone: answer(info)))

    def delete(self, msg: DeleteRecords) -> Staged:
        """A record delete on a replicated topic this node leads (replica_ops.py)."""
        self.check_led(msg.topic)
        lead = self.replicas.lead(msg.topic)
        topic = self.registry.get(msg.topic)
        return self.ops.request(msg, topic, lead.leader_epoch, lead.tracker,
                                lambda: self._ops_durable(topic))

    def _ops_durable(self, topic: TopicState) -> None:
        """The leader's own ops are durable: wake its followers' fetches for them."""
        lead = self.replicas.lead(topic.name)
        if lead is None:
            return
        self.replicas.wake(FETCH_PREFIX + topic.name)
        if lead.tracker.leader_ops_durable(ops_of(topic).leo):
            self.ops_moved(topic)

    def ops_moved(self, topic: TopicState) -> None:
        """Apply what is committed now; parked fetches learn the new commit point."""
        lead = self.replicas.lead(topic.name)
        if (lead is not None and not self.fenced
                and lead.tracker.ops_hw > ops_of(topic).applied):
            self.ops.apply_committed(topic, lead.tracker.ops_hw)
            self.replicas.wake(FETCH_PREFIX + topic.name)

    # --- the high watermark and the ISR -------------------------------------------------------

    def set_fence(self, fenced: bool) -> None:
        """While fenced, the high watermark and the `acks: all` answers wait; when the
        session is back, they catch up with what the followers reported meanwhile."""
        if fenced == self.fenced:
            return
        self.fenced = fenced
        log.warning("event=leaders_fenced" if fenced else "event=leaders_unfenced")
        if not fenced:
            for name, _lead in self.replicas.led():
                topic = self.registry.get(name)
                if topic is not None:
                    self.advance(topic, True)
                    self.ops_moved(topic)

    def advance(self, topic: TopicState, moved: bool) -> None:
        """The tracker's high watermark moved: readers see up to it, and the `acks: all`
        writes it covers are answered."""
        if not moved or self.fenced:
            return
        lead = self.replicas.lead(topic.name)
        hw = lead.tracker.hw_seq
        if hw < (topic.hw or 0):
            raise InvariantViolation(f"the high watermark of {topic.name!r} went back from "
                                     f"{topic.hw} to {hw}")
        if hw > topic.head:
            raise InvariantViolation(f"the high watermark of {topic.name!r} ({hw}) passed "
                                     f"the leader's own log end ({topic.head})")
        topic.hw = hw
        self.replicas.wake(topic.name)
        for peer, corr, t0, body in lead.released(hw):
            self.replicas.release(Released(peer, corr, t0, body, None))

    def isr_proposals(self) -> list[tuple[str, int, int, list[str]]]:
        """(topic, leader_epoch, version, isr) for each ISR change to write now."""
        out, now = [], self.clock_ms()
        for name, lead in self.replicas.led():
            wanted = lead.proposal(now)
            if wanted is None:
                continue
            role = self.replicas.role(name)
            out.append((name, role.leader_epoch, role.version, list(wanted)))
        return out


def unsettled(topic: TopicState, leader_epoch: int) -> bool:
    """Whether the copy may not lead in `leader_epoch`: it recovered in that epoch (or a
    later one), so its log may lack records its followers hold of it (a power loss)."""
    return topic.unsettled_epoch is not None and leader_epoch <= topic.unsettled_epoch
