"""A shard's part in replication (docs/CLUSTER.md): for each replicated topic it owns, this
node leads it, follows it, or only knows where it is led.

The supervisor sends the topics' replication states as ZooKeeper holds them (ReplicaRoles).
A leader answers its followers' fetches and epoch queries, tracks their durable progress
(cluster/isr_tracker.py), raises the high watermark, answers `acks: all` writes once the
watermark covers them and proposes ISR changes (IsrChange, written by its supervisor with a
compare-and-swap). A follower's fetches are made by the shell (shard/replication/replica_fetcher.py)
from the state machine of cluster/follower_fetch.py; what they bring is applied here, at the
leader's seqs, through the shard's own WAL and group commit. Readers of a replicated topic
never see a seq above its high watermark (TopicState.visible).

A replica whose log diverged from the leader's below its own head (KIP-101) is cut back in
place where the logs part (shard/replication/replica_cut.py: a Truncate frame, never below the high
watermark), or when that is not safe, or it lacks ops the leader dropped, fetched anew.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from topics_actors.cluster.epoch_cache import EpochCache, EpochEnd
from topics_actors.cluster.follower_fetch import (
    EpochQuery as EpochAsk, FetchAnswer, FetchRequest, FollowerFetch,
)
from topics_actors.cluster.isr_tracker import AckWaiters, IsrTracker
from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.ledger import retention_rules
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import Append, DeleteRecords, EpochQuery, ReplicaFetch
from topics_actors.shard import topic_admin
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, read_op, write_op
from topics_actors.shard.checkpoint_window import CheckpointWindow
from topics_actors.shard.long_poll import Park
from topics_actors.shard.replication import replica_frames
from topics_actors.shard.replication import replica_records
from topics_actors.shard.replication.replica_cut import ReplicaCut
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication.replica_ops import AwaitOp, ReplicaOps, ops_of
from topics_actors.shard.replication.replica_role import Role
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.file_table import make_loc
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import parse_config
from topics_actors.topic_identity import topic_id

log = logging.getLogger(__name__)

LAG_TIME_MS = 10_000          # a follower not caught up this long leaves the ISR
FETCH_WAIT_MS = 500           # how long a leader parks a caught-up fetch
FETCH_BYTES_MAX = 1 << 20     # payload per fetch answer
FETCH_RECORDS_MAX = 2_000
ACK_WAITERS_MAX = 100_000     # `acks: all` writes waiting for the watermark, per topic
ACKS = ("none", "leader", "all")
FETCH_PREFIX = "\0r"          # parked fetches wait under this + topic (not a reader's wake)
PLACE_PREFIX = "\0p"          # a put_topic waiting for the cluster to place its topic


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class AwaitHw(NamedTuple):
    """An `acks: all` reply held until the high watermark covers `last_seq`."""
    topic: str
    last_seq: int
    body: dict


class Released(NamedTuple):
    peer: bytes
    corr: int
    t0_ns: int
    body: dict | None
    error: TopicsError | None


class ReplicaBook:
    def __init__(self, node_id: str | None, stager: BatchStager, registry: TopicRegistry,
                 reader: RecordReader, drop_buffer, clock_ms=monotonic_ms,
                 checkpoints: CheckpointWindow | None = None):
        self.node_id = node_id
        self.stager, self.registry, self.reader = stager, registry, reader
        self.drop_buffer = drop_buffer
        self.clock_ms = clock_ms
        self.roles: dict[str, Role] = {}
        self.leading: dict[str, IsrTracker] = {}
        self.following: dict[str, FollowerFetch] = {}
        self.waiters: dict[str, AckWaiters] = {}
        self.released: list[Released] = []     # answers for the shell to send
        self.hw_moved: set[str] = set()        # topics whose readers may see more
        self.proposals: dict[str, tuple] = {}  # topic -> ISR last proposed (not re-sent)
        self.placing: dict[str, tuple[dict, bool]] = {}   # topic -> (config, create): to
                                               # place or look up in the cluster (shell sends)
        self.refusals: dict[str, str] = {}     # placements the cluster refused, and why
        self.absent: set[str] = set()          # lookups the cluster found no state for
        self.placed: set[str] = set()          # topics whose state arrived (wake put_topic)
        self.reconfiguring: dict[str, dict] = {}   # topic -> the config a put_topic waits for
        self.deleting: set[str] = set()        # topics a delete_topic waits to see deleted
        self.tombstones: dict[str, int] = {}   # deleted topic -> its tombstone's version
        self.retired: list[str] = []           # copies this batch drops (woken at commit)
        self.leader_changes = 0
        self.fenced = False                    # our ZooKeeper session is not connected
        self.ops = ReplicaOps(stager, reader, lambda *answer: self.released.append(
            Released(*answer)))
        self.ops_durable: dict[str, int] = {}   # followed topic -> its durable op log end
        self.read_memo: dict[str, tuple] = {}   # led topic -> (what was read, its records):
                                                # followers in step fetch the same range
        self.cut = ReplicaCut(stager, reader, checkpoints or CheckpointWindow())

    @property
    def enabled(self) -> bool:
        return self.node_id is not None

    # --- roles from the supervisor -----------------------------------------------------------

    def take_roles(self, msg: ReplicaRoles) -> Staged:
        """Apply the replication states of the topics this shard owns: create missing local
        copies, start or stop leading and following. A write (creations, epoch frames)."""
        owned = [Role.from_wire(raw) for raw in msg.roles
                 if self.registry.owns(topic_id(raw["topic"]))]
        for role in owned:
            self._take(role)
        for name, reason in (msg.refused or {}).items():
            if self.placing.pop(name, None) is not None:
                self.refusals[name] = reason
                self.placed.add(name)
        for name in msg.absent or ():
            placing = self.placing.get(name)
            if placing is not None and not placing[1]:    # a lookup, not a creation
                del self.placing[name]
                self.absent.add(name)
                self.placed.add(name)
        self._set_fence(msg.fenced)
        if msg.complete:
            named = {role.topic for role in owned}
            for gone in [t for t in self.roles if t not in named]:
                self._stop_leading(gone)
                self.following.pop(gone, None)
                del self.roles[gone]
        retired, self.retired = self.retired, []

        def taken(info: CommitInfo) -> dict:
            info.woken.update(retired)       # parked readers learn that the topic is gone
            return {"roles": len(owned)}
        return write_op(taken)

    def _take(self, role: Role) -> None:
        if role.deleted:
            self._retire(role)
            return
        if self.tombstones.get(role.topic, -1) >= role.version:
            return                                   # a state from before the deletion
        before = self.roles.get(role.topic)
        if before is not None and before.version > role.version and (
                before.leader_epoch >= role.leader_epoch):
            return                                   # an older state arriving late
        self.roles[role.topic] = role
        if self.placing.pop(role.topic, None) is not None:
            self.placed.add(role.topic)
        if self.node_id not in role.replicas:
            self._stop_leading(role.topic)
            self.following.pop(role.topic, None)
            return
        topic = self._local_copy(role)
        if before is None or before.config != role.config:
            topic_admin.take_cluster_config(self.stager, topic, role.config)
            if self.reconfiguring.get(role.topic) == role.config:
                self.placed.add(role.topic)      # wakes the put_topic waiting for it
        topic.follower = role.leader != self.node_id
        if role.leader == self.node_id:
            self.following.pop(role.topic, None)
            self._lead(role, topic)
        else:
            self._stop_leading(role.topic)
            self._follow(role, topic)

    def _retire(self, role: Role) -> None:
        """A deleted topic's tombstone: no role here any more, and no copy (again at every
        roles message while one is left: a failed batch may have kept it)."""
        self.tombstones[role.topic] = max(role.version, self.tombstones.get(role.topic, -1))
        self._stop_leading(role.topic)
        self.following.pop(role.topic, None)
        self.roles.pop(role.topic, None)
        topic = self.registry.get(role.topic)
        if topic is not None and self.node_id in role.replicas:
            topic_admin.drop_topic(self.stager, self.registry, topic)
            self.retired.append(role.topic)
            log.info("event=copy_deleted topic=%s", role.topic)
        if role.topic in self.deleting:
            self.placed.add(role.topic)          # wakes the delete_topic waiting for it

    def _local_copy(self, role: Role) -> TopicState:
        topic = self.registry.get(role.topic)
        if topic is not None and topic_admin.stale_cluster_copy(topic, role.first_epoch,
                                                                role.config):
            log.warning("event=stale_copy_dropped topic=%s first_epoch=%d", role.topic,
                        role.first_epoch)       # of a deleted topic of the same name
            topic_admin.drop_topic(self.stager, self.registry, topic)
            self._stop_leading(role.topic)
            self.following.pop(role.topic, None)      # its fetch state goes with it
            topic = None
        if topic is None:
            topic = topic_admin.create_topic(self.stager, self.registry, role.topic,
                                             parse_config(role.config, role.topic))
        if topic.epochs is None:
            topic.epochs = EpochCache()
        if topic.hw is None:
            topic.hw = 0
        return topic

    def _lead(self, role: Role, topic: TopicState) -> None:
        tracker = self.leading.get(role.topic)
        now = self.clock_ms()
        if tracker is None or self._epoch_of(role.topic) != role.leader_epoch:
            start = topic.next_seq
            if topic.epochs.latest != role.leader_epoch:
                # The epoch's start is durable before the epoch's first record (same batch,
                # earlier in it): a recovery rebuilds the cache from these frames.
                self.stager.save_undo(topic.name, topic)
                self.stager.frame(FrameType.EPOCH, topic,
                                  frame_body.encode_u64(role.leader_epoch), seq=start)
                topic.epochs.assign(role.leader_epoch, start)
            tracker = IsrTracker(self.node_id, role.replicas, role.isr,
                                 topic.config.min_isr, LAG_TIME_MS,
                                 topic.epochs.entries()[-1][1], topic.head + 1,
                                 (topic.hw or 0) + 1, now)
            ops = ops_of(topic)
            tracker.start_ops(ops.leo, ops.applied)
            if not topic.config.leases_durable:
                topic.queue = None  # memory-only leases are a leader's alone: a new leader
                                    # starts with every job ready (a held job may come again)
            self.leading[role.topic] = tracker
            self.waiters.setdefault(role.topic, AckWaiters(ACK_WAITERS_MAX))
            self.leader_changes += 1
            log.info("event=leading topic=%s leader_epoch=%d isr=%s leo=%d", role.topic,
                     role.leader_epoch, ",".join(role.isr), topic.head + 1)
            self._advance(topic, tracker.leader_committed(topic.head + 1))
        else:
            tracker.replicas, tracker.min_isr = role.replicas, topic.config.min_isr
            if tracker.isr != role.isr:
                self._advance(topic, tracker.isr_written(role.isr))
        tracker.leader_epoch = role.leader_epoch
        self.proposals.pop(role.topic, None)
        self._ops_moved(topic)

    def _epoch_of(self, name: str) -> int | None:
        tracker = self.leading.get(name)
        return getattr(tracker, "leader_epoch", None)

    def _follow(self, role: Role, topic: TopicState) -> None:
        fetch = self.following.get(role.topic)
        if role.leader is None:
            self.following.pop(role.topic, None)     # offline: nobody to copy from
            return
        if fetch is None:
            self.following[role.topic] = FollowerFetch(role.topic, role.leader_epoch,
                                                       topic.epochs, topic.head + 1)
            self.ops_durable[role.topic] = ops_of(topic).leo
        else:
            fetch.new_leader_epoch(role.leader_epoch)

    def _stop_leading(self, name: str) -> None:
        self.read_memo.pop(name, None)
        if self.leading.pop(name, None) is None:
            return
        role = self.roles.get(name)
        error = TopicsError(f"leadership of {name!r} moved before the write was on every "
                            f"in-sync replica: it may or may not survive",
                            ErrorCode.NOT_LEADER, role.hint() if role else {"topic": name})
        for peer, corr, t0, _body in (self.waiters.pop(name, None) or AckWaiters(0)).drain():
            self.released.append(Released(peer, corr, t0, None, error))
        self.ops.drop_waiters(name, error)

    # --- the leader's side --------------------------------------------------------------------

    def check_request(self, msg) -> None:
        """Refuse a request for a replicated topic this node does not lead: not_leader with
        where it is led (the gateway and the client follow it)."""
        self.check_request_named(msg.topic)

    def check_request_named(self, name: str) -> None:
        role = self.roles.get(name)
        if role is None or name in self.leading:
            return
        raise TopicsError(f"topic {name!r} is led by node {role.leader!r}"
                          if role.leader else f"topic {name!r} has no leader now",
                          ErrorCode.NOT_LEADER, role.hint())

    def check_append(self, msg: Append) -> bool:
        """Whether the append waits for the watermark (`acks: all`); raises when it cannot
        be taken here."""
        if msg.acks is not None and msg.acks not in ACKS:
            raise invalid("acks must be one of none, leader, all")
        tracker = self.leading.get(msg.topic)
        if tracker is None:
            self.check_request(msg)
            return False
        if (msg.acks or "all") != "all" or len(tracker.replicas) == 1:
            return False
        tracker.require_min_isr("that acks=all")
        return True

    def hold(self, peer: bytes, corr: int, t0_ns: int, held: AwaitHw) -> bool:
        """Keep an `acks: all` reply until the watermark covers it; False: answer now."""
        topic = self.registry.get(held.topic)
        if topic is None or topic.visible >= held.last_seq:
            return False
        waiters = self.waiters.get(held.topic)
        if waiters is None:
            raise TopicsError(f"leadership of {held.topic!r} moved", ErrorCode.NOT_LEADER)
        if not waiters.add(held.last_seq, (peer, corr, t0_ns, held.body)):
            raise TopicsError("too many writes wait for replication; retry",
                              ErrorCode.THROTTLED, {"retry_after_ms": 100})
        return True

    def committed(self, woken: set[str]) -> None:
        """After a commit: the leader's own log end is durable for the topics it woke."""
        for name in woken:
            tracker = self.leading.get(name)
            topic = self.registry.get(name)
            if tracker is not None and topic is not None:
                self._advance(topic, tracker.leader_committed(topic.head + 1))

    def after_commit(self, woken: set[str]) -> set[str]:
        """The wake-ups of a commit: a leader's records wake its followers' parked fetches,
        and its readers only once the high watermark moves."""
        self.committed(woken)
        out = {FETCH_PREFIX + name if name in self.leading else name for name in woken}
        out |= self.hw_moved
        out |= {PLACE_PREFIX + name for name in self.placed}
        self.hw_moved, self.placed = set(), set()
        return out

    def fetch(self, msg: ReplicaFetch) -> Staged:
        tracker, topic = self._led(msg.topic, msg.leader_epoch)
        if msg.fetch_leo > topic.head + 1:
            raise TopicsError(f"fetch from {msg.fetch_leo} past the leader's log end "
                              f"{topic.head + 1}", ErrorCode.INVALID_REQUEST,
                              {"reason": "seq_out_of_range", "leo": topic.head + 1})
        self._advance(topic, tracker.fetched(msg.node, msg.fetch_leo, self.clock_ms()))
        if tracker.ops_fetched(msg.node, msg.ops_leo):
            self._ops_moved(topic)

        def now() -> dict:
            body = self._records_from(msg, tracker)
            body.update(self.ops.answer(topic, msg.ops_leo, msg.ops_epoch, tracker))
            body["ops_applied"] = ops_of(topic).applied
            return body

        def answer(_info: CommitInfo):
            body = now()
            quiet = (not body["records"] and body["end_leo"] == msg.fetch_leo
                     and not body.get("ops") and "ops_drop" not in body
                     and "ops_reset" not in body and body["ops_hw"] <= msg.ops_applied)
            if quiet and msg.wait_ms > 0:
                return Park(FETCH_PREFIX + msg.topic, msg.wait_ms, now)
            return body
        return read_op(answer)

    def queue_replicated(self, name: str, what: str) -> bool:
        """Whether a queue request on `name` goes through its op log (this node leads a
        topic of several copies); raises not_enough_replicas under min_isr, before the
        request stages anything."""
        role, tracker = self.roles.get(name), self.leading.get(name)
        if role is None or len(role.replicas) < 2 or tracker is None:
            return False
        tracker.require_min_isr(what)
        return True

    def log_queue_op(self, topic: TopicState, body: list, answer) -> Staged:
        """A replicated queue's ack or lease events (queue_ops.py): its op, answered by
        `answer(info)` (info: the commit that logged it) once applied."""
        tracker = self.leading[topic.name]
        return self.ops.log(topic, tracker.leader_epoch, body,
                            lambda: self._ops_durable(topic),
                            lambda no, info: AwaitOp(topic.name, no,
                                                     lambda _gone: answer(info)))

    def delete(self, msg: DeleteRecords) -> Staged:
        """A record delete on a replicated topic this node leads (replica_ops.py)."""
        self.check_request(msg)
        tracker = self.leading[msg.topic]
        topic = self.registry.get(msg.topic)
        return self.ops.request(msg, topic, tracker.leader_epoch, tracker,
                                lambda: self._ops_durable(topic))

    def _ops_durable(self, topic: TopicState) -> None:
        """The leader's own ops are durable: wake its followers' fetches for them."""
        tracker = self.leading.get(topic.name)
        if tracker is None:
            return
        self.hw_moved.add(FETCH_PREFIX + topic.name)
        if tracker.leader_ops_durable(ops_of(topic).leo):
            self._ops_moved(topic)

    def _ops_moved(self, topic: TopicState) -> None:
        """Apply what is committed now; parked fetches learn the new commit point."""
        tracker = self.leading.get(topic.name)
        if tracker is not None and not self.fenced and tracker.ops_hw > ops_of(topic).applied:
            self.ops.apply_committed(topic, tracker.ops_hw)
            self.hw_moved.add(FETCH_PREFIX + topic.name)

    def _records_from(self, msg: ReplicaFetch, tracker: IsrTracker) -> dict:
        topic = self.registry.get(msg.topic)
        if topic is None or self.leading.get(msg.topic) is not tracker:
            raise TopicsError(f"no longer the leader of {msg.topic!r}", ErrorCode.NOT_LEADER)
        budget = min(msg.max_bytes or FETCH_BYTES_MAX, FETCH_BYTES_MAX)
        key = (topic, msg.fetch_leo, budget, msg.frames, topic.head, topic.earliest_seq(),
               topic.evict_floor, topic.expiry_floor, topic.deletions)
        memo = self.read_memo.get(msg.topic)
        if memo is None or memo[0] != key:
            memo = key, replica_records.read_for(self.reader, topic, msg.fetch_leo, budget,
                                                 msg.frames)
            self.read_memo[msg.topic] = memo
        return {**memo[1], "leader_epoch": tracker.leader_epoch, "hw": tracker.hw_seq}

    def epoch_end(self, msg: EpochQuery) -> Staged:
        _tracker, topic = self._led(msg.topic, msg.leader_epoch)
        end = topic.epochs.end_for(msg.epoch, topic.head + 1) if msg.epoch is not None else (
            EpochEnd(topic.epochs.latest, topic.head + 1))
        return read_op(lambda info: {"topic": topic.name, "leader_epoch": msg.leader_epoch,
                                     "epoch": end.epoch, "end_leo": end.end_leo})

    def _led(self, name: str, leader_epoch: int) -> tuple[IsrTracker, TopicState]:
        tracker = self.leading.get(name)
        topic = self.registry.get(name)
        if tracker is None or topic is None:
            role = self.roles.get(name)
            raise TopicsError(f"not the leader of {name!r}", ErrorCode.NOT_LEADER,
                              role.hint() if role else {"topic": name})
        if leader_epoch != tracker.leader_epoch:
            raise TopicsError(f"leader epoch {leader_epoch} is not the current "
                              f"{tracker.leader_epoch} of {name!r}", ErrorCode.NOT_LEADER,
                              self.roles[name].hint())
        return tracker, topic

    def _set_fence(self, fenced: bool) -> None:
        """While fenced, the high watermark and the `acks: all` answers wait; when the
        session is back, they catch up with what the followers reported meanwhile."""
        if fenced == self.fenced:
            return
        self.fenced = fenced
        log.warning("event=leaders_fenced" if fenced else "event=leaders_unfenced")
        if not fenced:
            for name in list(self.leading):
                topic = self.registry.get(name)
                if topic is not None:
                    self._advance(topic, True)
                    self._ops_moved(topic)

    def _advance(self, topic: TopicState, moved: bool) -> None:
        if not moved or self.fenced:
            return
        tracker = self.leading[topic.name]
        topic.hw = tracker.hw_seq
        self.hw_moved.add(topic.name)
        waiters = self.waiters.get(topic.name)
        if waiters is not None:
            for peer, corr, t0, body in waiters.released(tracker.hw_seq):
                self.released.append(Released(peer, corr, t0, body, None))

    def isr_proposals(self) -> list[tuple[str, int, int, list[str]]]:
        """(topic, leader_epoch, version, isr) for each ISR change to write now."""
        out, now = [], self.clock_ms()
        for name, tracker in self.leading.items():
            wanted = tracker.proposal(now)
            if wanted is None or self.proposals.get(name) == wanted:
                continue
            self.proposals[name] = wanted
            role = self.roles[name]
            out.append((name, role.leader_epoch, role.version, list(wanted)))
        return out

    # --- the follower's side ------------------------------------------------------------------

    def requests(self) -> list[tuple[str, str, object]]:
        """(topic, leader shard endpoint, request) for every followed topic ready to ask."""
        out = []
        for name, fetch in self.following.items():
            role = self.roles.get(name)
            if role is None or role.leader_shard is None:
                continue
            ask = fetch.next_request()
            if isinstance(ask, EpochAsk):
                out.append((name, role.leader_shard,
                            EpochQuery(name, self.node_id, ask.leader_epoch, ask.asked_epoch)))
            elif isinstance(ask, FetchRequest):
                ops = ops_of(self.registry.get(name))
                ops_leo = self.ops_durable.get(name, ops.leo)
                out.append((name, role.leader_shard,
                            ReplicaFetch(name, self.node_id, ask.leader_epoch, ask.fetch_leo,
                                         FETCH_WAIT_MS, FETCH_BYTES_MAX, ops_leo,
                                         ops.pending_epoch, ops.applied, frames=True)))
        return out

    def apply(self, msg: "ReplicaAnswer") -> Staged:
        """A leader's answer, handed in by the shell: an epoch answer may drop the local
        copy; a fetch answer stages its records at the leader's seqs."""
        fetch = self.following.get(msg.topic)
        topic = self.registry.get(msg.topic)
        if fetch is None or topic is None:
            return read_op(lambda info: {"applied": 0})
        body = msg.body
        if msg.kind == "epoch_query":
            epochs = topic.epochs.entries()
            cut = fetch.on_epoch_end(body["leader_epoch"],
                                     EpochEnd(body["epoch"], body["end_leo"]))
            if cut is not None:   # cut in place when safe (replica_cut.py), else reset
                return self.cut.diverged(topic, fetch, cut.leo - 1, epochs, lambda reason:
                                         self._reset(topic, fetch, reason=reason))
            return read_op(lambda info: {"applied": 0})
        answer = FetchAnswer(body["leader_epoch"], body["first_seq"], body["records"],
                             [tuple(e) for e in body["epochs"]], body["hw"])
        if not fetch.is_current(answer):
            return read_op(lambda info: {"applied": 0})
        if body.get("ops_reset"):       # the leader no longer holds the ops we lack
            return self._reset(topic, fetch, body.get("ops_applied", 0))
        runs = replica_frames.verified(topic, body, self.stager.stats)
        if runs is None:                # refused whole (logged, counted): asked again
            return read_op(lambda info: {"applied": 0})
        if self.stager.inbox_full():    # no room in this batch: asked again, nothing moved
            self.stager.stats.throttled += 1
            return read_op(lambda info: {"applied": 0})
        latest = fetch.cache.latest
        new_epochs = [(e, s) for e, s in answer.epochs if latest is None or e > latest]
        moved = fetch.on_fetch_range(answer, body["end_leo"])
        return self._append_fetched(topic, fetch, answer, runs, new_epochs if moved else [],
                                  body["end_leo"] if moved else None, body)

    def _reset(self, topic: TopicState, fetch: FollowerFetch, ops_applied: int = 0,
               reason: str = "ops_reset") -> Staged:
        """Drop the local copy and fetch the topic again (replica_cut.py `reset`)."""
        staged, fresh = self.cut.reset(self.registry, topic, ops_applied, reason,
                                       self.drop_buffer)
        self.following[topic.name] = FollowerFetch(
            topic.name, self.roles[topic.name].leader_epoch, fresh.epochs, 1)
        self.ops_durable[topic.name] = ops_of(fresh).leo
        return staged

    def _append_fetched(self, topic: TopicState, fetch: FollowerFetch, answer: FetchAnswer,
                      runs: list, new_epochs: list[tuple[int, int]], end_leo: int | None,
                      body: dict) -> Staged:
        """Stage a fetch answer: its records and frames (`runs`, checked; when `end_leo`:
        the answer moved the log end) at the leader's seqs, then its ops (replica_ops.py)."""
        stager = self.stager
        stager.throttle()
        stager.save_undo(topic.name, topic)
        staged = replica_records.append_fetched(stager, topic, answer.records, runs, new_epochs,
                                       end_leo) if end_leo else []
        log_end = end_leo or topic.head + 1
        floors = replica_records.take_floors(stager, topic, body.get("floors"), log_end)
        ops_applied = self.ops.take(topic, body, log_end)
        hw = answer.hw_seq

        def publish(info: CommitInfo) -> dict:
            for run in staged:
                topic.pad_to(run.first - 1)
                topic.publish(run.first, run.locs(make_loc(info.file_no, info.offset)),
                              run.payload_bytes, run.ts)
            if end_leo:
                topic.pad_to(end_leo - 1)
                fetch.committed(topic.head + 1)
            if floors is not None:
                retention_rules.apply(topic, self.reader.read, floors)
            if ops_applied is not None:
                ops_applied(info)
            self.ops_durable[topic.name] = ops_of(topic).leo
            topic.hw = max(topic.hw or 0, min(hw, topic.head))
            info.woken.add(topic.name)
            return {"applied": sum(len(run.offsets) for run in staged)}
        return write_op(publish)

    def leader_behind(self, name: str) -> None:
        """A fetch was refused as past the leader's log end: reconcile by epochs again
        (the next request is an epoch query, which drops a copy that went further)."""
        fetch = self.following.get(name)
        if fetch is not None:
            fetch.leader_behind()

    def failed(self, name: str) -> None:
        """The batch holding this topic's copies failed: fetch again from what is durable."""
        fetch, topic = self.following.get(name), self.registry.get(name)
        if fetch is not None and topic is not None:
            fetch.committed(topic.head + 1)


class ReplicaAnswer(NamedTuple):
    """shell -> core: a leader's answer to this shard's epoch query or fetch."""
    topic: str
    kind: str          # "epoch_query" | "replica_fetch"
    body: dict
