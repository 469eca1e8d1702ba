"""The follower's side of replication in a shard (docs/CLUSTER.md): for each topic it
follows, the next request to its leader (an epoch query until the logs agree, then
fetches, made by the shell: replica_fetcher.py, from the state machine of
cluster/follower_fetch.py), and each answer applied at the leader's seqs, through the
shard's own WAL and group commit.

A copy whose log diverged from the leader's below its own head (KIP-101) is cut back in
place where the logs part (replica_cut.py: a Truncate frame, never below the high
watermark), or, when that is not safe or it lacks ops the leader dropped, fetched anew.
"""

from __future__ import annotations

from topics_actors.cluster.epoch_cache import EpochEnd
from topics_actors.cluster.follower_fetch import (
    EpochQuery as EpochAsk, FetchAnswer, FetchRequest, FollowerFetch,
)
from topics_actors.errors import InvariantViolation
from topics_actors.ledger import retention_rules
from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import EpochQuery, ReplicaFetch
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, read_op, write_op
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication import replica_frames, replica_keys, replica_records
from topics_actors.shard.replication.replica import Followership, Replicas
from topics_actors.shard.replication.replica_cut import ReplicaCut
from topics_actors.shard.replication.replica_ops import ReplicaOps, ops_of
from topics_actors.shard.replication.replica_role import AnswerKind, Role
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage.file_table import make_loc

FETCH_WAIT_MS = 500           # how long a leader parks a caught-up fetch
FETCH_BYTES_MAX = 1 << 20     # payload per fetch answer


def _nothing(_info: CommitInfo) -> dict:
    return {"applied": 0}


class FollowerDuties:
    def __init__(self, node_id: str, replicas: Replicas, stager: BatchStager,
                 registry: TopicRegistry, reader: RecordReader, ops: ReplicaOps,
                 cut: ReplicaCut, drop_buffer):
        self.node_id = node_id
        self.replicas = replicas
        self.stager, self.registry, self.reader = stager, registry, reader
        self.ops = ops
        self.cut = cut
        self.drop_buffer = drop_buffer

    def begin(self, role: Role, topic: TopicState) -> None:
        """Follow `topic` as `role` says (nobody to follow while it has no leader)."""
        follow = self.replicas.follow(role.topic)
        if role.leader is None:
            self.replicas.stop_following(role.topic)     # offline: nobody to copy from
            return
        topic.unsettled_epoch = None      # another copy leads this epoch: this one follows
        if follow is None:
            self.replicas.start_following(role.topic, Followership(
                FollowerFetch(role.topic, role.leader_epoch, topic.epochs, topic.head + 1),
                ops_of(topic).leo))
        else:
            follow.fetch.new_leader_epoch(role.leader_epoch)

    def requests(self) -> list[tuple[str, str, object]]:
        """(topic, leader shard endpoint, request) for every followed topic ready to ask."""
        out = []
        for name, follow in self.replicas.followed():
            role = self.replicas.role(name)
            if role.leader_shard is None:
                continue
            ask = follow.fetch.next_request()
            if isinstance(ask, EpochAsk):
                out.append((name, role.leader_shard,
                            EpochQuery(name, self.node_id, ask.leader_epoch, ask.asked_epoch)))
            elif isinstance(ask, FetchRequest):
                ops = ops_of(self.registry.get(name))
                out.append((name, role.leader_shard,
                            ReplicaFetch(name, self.node_id, ask.leader_epoch, ask.fetch_leo,
                                         FETCH_WAIT_MS, FETCH_BYTES_MAX, follow.ops_durable,
                                         ops.pending_epoch, ops.applied, frames=True)))
        return out

    def apply(self, msg) -> Staged:
        """A leader's answer (a ReplicaAnswer), handed in by the shell: an epoch answer may
        cut or drop the local copy; a fetch answer stages its records at the leader's
        seqs."""
        follow = self.replicas.follow(msg.topic)
        topic = self.registry.get(msg.topic)
        if follow is None or topic is None:
            return read_op(_nothing)
        fetch, body = follow.fetch, msg.body
        if AnswerKind(msg.kind) is AnswerKind.EPOCH_QUERY:
            epochs = topic.epochs.entries()
            cut = fetch.on_epoch_end(body["leader_epoch"],
                                     EpochEnd(body["epoch"], body["end_leo"]))
            if cut is not None:   # cut in place when safe (replica_cut.py), else reset
                return self.cut.diverged(topic, fetch, cut.leo - 1, epochs, lambda reason:
                                         self._reset(topic, reason=reason))
            return read_op(_nothing)
        answer = FetchAnswer(body["leader_epoch"], body["first_seq"], body["records"],
                             [tuple(e) for e in body["epochs"]], body["hw"])
        if not fetch.is_current(answer):
            return read_op(_nothing)
        if body.get("ops_reset"):       # the leader no longer holds the ops we lack
            return self._reset(topic, body.get("ops_applied", 0))
        runs = replica_frames.verified(topic, body, self.stager.stats)
        if runs is None:                # refused whole (logged, counted): asked again
            return read_op(_nothing)
        if self.stager.inbox_full():    # no room in this batch: asked again, nothing moved
            self.stager.stats.throttled += 1
            return read_op(_nothing)
        latest = fetch.cache.latest
        new_epochs = [(e, s) for e, s in answer.epochs if latest is None or e > latest]
        moved = fetch.on_fetch_range(answer, body["end_leo"])
        return self._append_fetched(topic, follow, answer, runs, new_epochs if moved else [],
                                    body["end_leo"] if moved else None, body)

    def _reset(self, topic: TopicState, ops_applied: int = 0,
               reason: str = "ops_reset") -> Staged:
        """Drop the local copy and fetch the topic again (replica_cut.py `reset`)."""
        staged, fresh = self.cut.reset(self.registry, topic, ops_applied, reason,
                                       self.drop_buffer)
        role = self.replicas.role(topic.name)
        self.replicas.start_following(topic.name, Followership(
            FollowerFetch(topic.name, role.leader_epoch, fresh.epochs, 1), ops_of(fresh).leo))
        return staged

    def _append_fetched(self, topic: TopicState, follow: Followership, answer: FetchAnswer,
                        runs: list, new_epochs: list[tuple[int, int]], end_leo: int | None,
                        body: dict) -> Staged:
        """Stage a fetch answer: its records and frames (`runs`, checked; when `end_leo`:
        the answer moved the log end) at the leader's seqs, then its ops (replica_ops.py)."""
        stager = self.stager
        stager.throttle()
        stager.save_undo(topic.name, topic)
        if answer.leader_epoch != follow.fetch.leader_epoch:
            raise InvariantViolation(f"an answer of leader epoch {answer.leader_epoch} "
                                     f"applied to {topic.name!r} in epoch "
                                     f"{follow.fetch.leader_epoch}")
        staged = replica_records.append_fetched(stager, topic, answer.records, runs,
                                                new_epochs, end_leo) if end_leo else []
        log_end = end_leo or topic.head + 1
        replica_keys.stage_keys(stager, topic, body.get("keys") or (), log_end,
                                topic.config.durability.acks_after_fsync)
        floors = replica_records.take_floors(stager, topic, body.get("floors"), log_end)
        ops_applied = self.ops.take(topic, body, log_end)
        hw = answer.hw_seq

        def publish(info: CommitInfo) -> dict:
            for run in staged:
                topic.pad_to(run.first - 1)
                topic.publish(run.first, run.locs(make_loc(info.file_no, info.offset)),
                              run.payload_bytes, run.ts)
            if staged and topic.tags is not None:   # as an append keeps its leader's
                topic.tags.extend(staged[0].first, topic.head,
                                  lambda seq: self.reader.read(topic, seq))
                topic.tags.trim(live_floor(topic))
            if end_leo:
                topic.pad_to(end_leo - 1)
                follow.fetch.committed(topic.head + 1)
            if floors is not None:
                retention_rules.apply(topic, self.reader.read, floors)
            if ops_applied is not None:
                ops_applied(info)
            follow.ops_written(ops_of(topic).leo)
            topic.hw = max(topic.hw or 0, min(hw, topic.head))
            info.woken.add(topic.name)
            return {"applied": sum(len(run.offsets) for run in staged)}
        return write_op(publish)

    def leader_behind(self, name: str) -> None:
        """A fetch was refused as past the leader's log end: reconcile by epochs again
        (the next request is an epoch query, which drops a copy that went further)."""
        follow = self.replicas.follow(name)
        if follow is not None:
            follow.fetch.leader_behind()

    def failed(self) -> None:
        """The batch holding the copies failed: fetch again from what is durable."""
        for name, follow in self.replicas.followed():
            topic = self.registry.get(name)
            if topic is not None:
                follow.fetch.committed(topic.head + 1)
