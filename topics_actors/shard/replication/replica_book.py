"""A shard's part in replication (docs/CLUSTER.md): for each replicated topic it owns, this
node leads it, follows it, or only knows where it is led (a Replica per topic:
replica.py); and what it waits on from the cluster (placements, config changes,
deletions: placement.py).

The supervisor sends the topics' replication states as ZooKeeper holds them (ReplicaRoles);
take_roles applies them: missing local copies are created, leading and following start
and stop. The leader's work is leader_duties.py (fetches, the high watermark, `acks: all`,
ops, ISR proposals), the follower's follower_duties.py (fetches made by the shell and their
answers applied at the leader's seqs).
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.shard import topic_admin
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, write_op
from topics_actors.shard.checkpoint_window import CheckpointWindow
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication.follower_duties import FollowerDuties
from topics_actors.shard.replication.fetch_answers import FetchAnswers
from topics_actors.shard.replication.leader_duties import FETCH_PREFIX, LeaderDuties
from topics_actors.shard.replication.placement import Placements
from topics_actors.shard.replication.replica import ReplicaKind, Released, Replicas
from topics_actors.shard.replication.replica_cut import ReplicaCut
from topics_actors.shard.replication.replica_ops import ReplicaOps
from topics_actors.shard.replication.replica_role import Role
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.topic_config import parse_config
from topics_actors.topic_identity import topic_id

log = logging.getLogger(__name__)

PLACE_PREFIX = "\0p"          # a put_topic waiting for the cluster to place its topic


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ReplicaAnswer(NamedTuple):
    """shell -> core: a leader's answer to this shard's epoch query or fetch."""
    topic: str
    kind: str          # replica_role.AnswerKind's value
    body: dict


class ReplicaBook:
    def __init__(self, node_id: str | None, stager: BatchStager, registry: TopicRegistry,
                 reader: RecordReader, drop_buffer, clock_ms=monotonic_ms,
                 checkpoints: CheckpointWindow | None = None):
        """`node_id`: this node's in the cluster; None on a node without TOPICS_ZK."""
        self.node_id = node_id
        self.stager, self.registry = stager, registry
        self.clock_ms = clock_ms
        self.replicas = Replicas()
        self.placements = Placements()
        self._tombstones: dict[str, int] = {}   # deleted topic -> its tombstone's version
        self._retired: list[str] = []           # copies this batch drops (woken at commit)
        self._unsettled: set[str] | None = None  # copies recovered unsettled (unsettled())
        self.ops = ReplicaOps(stager, reader, lambda *answer: self.replicas.release(
            Released(*answer)))
        self.cut = ReplicaCut(stager, reader, checkpoints or CheckpointWindow())
        self.leader = LeaderDuties(node_id, self.replicas, stager, registry, reader, self.ops,
                                   clock_ms)
        self.answers = FetchAnswers(self.leader)
        self.follower = FollowerDuties(node_id, self.replicas, stager, registry, reader,
                                       self.ops, self.cut, drop_buffer)

    @property
    def enabled(self) -> bool:
        return self.node_id is not None

    def role(self, name: str) -> Role | None:
        return self.replicas.role(name)

    def tombstoned(self, name: str) -> bool:
        return name in self._tombstones

    # --- roles from the supervisor -----------------------------------------------------------

    def take_roles(self, msg: ReplicaRoles) -> Staged:
        """Apply the replication states of the topics this shard owns: create missing local
        copies, start or stop leading and following. A write (creations, epoch frames)."""
        owned = [Role.from_wire(raw) for raw in msg.roles
                 if self.registry.owns(topic_id(raw["topic"]))]
        if self.registry.shard in (msg.settled or ()):
            self._settle_all()      # only this process crashed: its copies lost nothing
        for role in owned:
            self._take(role)
        for name, reason in (msg.refused or {}).items():
            self.placements.refused(name, reason)
        for name, asked_ns in (msg.absent or {}).items():
            self.placements.absent(name, asked_ns)
        self.leader.set_fence(msg.fenced)
        if msg.complete:
            named = {role.topic for role in owned}
            for gone in [t for t in self.replicas.names() if t not in named]:
                self.leader.stop(gone)
                self.replicas.remove(gone)
        retired, self._retired = self._retired, []
        pads, self.leader.pads = self.leader.pads, []

        def taken(info: CommitInfo) -> dict:
            for topic, seq in pads:          # a new leader's settled reservation (holes)
                topic.pad_to(seq)
            info.woken.update(retired)       # parked readers learn that the topic is gone
            return {"roles": len(owned)}
        return write_op(taken)

    def _settle_all(self) -> None:
        for name, _epoch in self.unsettled().items():
            self.registry.get(name).unsettled_epoch = None

    def unsettled(self) -> dict[str, int]:
        """{topic: leader epoch} of the copies here that recovered in that epoch and may
        not lead in it: the supervisor registers them, and the controller gives a topic
        whose leader is among them a new epoch (cluster/leader_election.py)."""
        if self._unsettled is None:      # once, after recovery
            self._unsettled = {t.name for t in self.registry if t.unsettled_epoch is not None}
        found = {}
        for name in list(self._unsettled):
            topic = self.registry.get(name)
            if topic is None or topic.unsettled_epoch is None:
                self._unsettled.discard(name)
            else:
                found[name] = topic.unsettled_epoch
        return found

    def _take(self, role: Role) -> None:
        if role.deleted:
            self._retire(role)
            return
        if self._tombstones.get(role.topic, -1) >= role.version:
            return                                   # a state from before the deletion
        before = self.replicas.role(role.topic)
        if before is not None and before.version > role.version and (
                before.leader_epoch >= role.leader_epoch):
            return                                   # an older state arriving late
        self.replicas.set_role(role)
        self.placements.arrived(role.topic)
        if self.node_id not in role.replicas:
            self.leader.stop(role.topic)
            self.replicas.stop_following(role.topic)
            self._drop_moved_copy(role, before)
            return
        topic = self._local_copy(role)
        if before is None or before.config != role.config:
            topic_admin.take_cluster_config(self.stager, topic, role.config)
            if self.placements.config_wanted(role.topic) == role.config:
                self.placements.wake(role.topic)     # the put_topic waiting for it
        topic.follower = role.leader != self.node_id
        if role.leader == self.node_id:
            self.replicas.stop_following(role.topic)
            self.leader.begin(role, topic)
        else:
            self.leader.stop(role.topic)
            self.follower.begin(role, topic)

    def _retire(self, role: Role) -> None:
        """A deleted topic's tombstone: no role here any more, and no copy (again at every
        roles message while one is left: a failed batch may have kept it)."""
        self._tombstones[role.topic] = max(role.version, self._tombstones.get(role.topic, -1))
        self.leader.stop(role.topic)
        self.replicas.remove(role.topic)
        topic = self.registry.get(role.topic)
        if topic is not None and self.node_id in role.replicas:
            topic_admin.drop_topic(self.stager, self.registry, topic)
            self._retired.append(role.topic)
            log.info("event=copy_deleted topic=%s", role.topic)
        if self.placements.deletion_wanted(role.topic):
            self.placements.wake(role.topic)         # the delete_topic waiting for it

    def _drop_moved_copy(self, role: Role, before: Role | None) -> None:
        """A copy of a topic whose replicas no longer name this node: a move took it off
        (cluster/reassignment.py; its last step, once the target is in sync), maybe while
        this node was down. Dropped; its parked readers wake and are sent to the leader. A
        copy with no leader epoch is a topic of this node's own (from before it joined the
        cluster) and stays."""
        topic = self.registry.get(role.topic)
        if topic is None:
            return
        was_replica = before is not None and self.node_id in before.replicas
        if not was_replica and not (topic.epochs is not None and topic.epochs.entries()):
            return
        topic_admin.drop_topic(self.stager, self.registry, topic)
        self._retired.append(role.topic)
        log.info("event=copy_moved_off topic=%s replicas=%s", role.topic,
                 ",".join(role.replicas))

    def _local_copy(self, role: Role) -> TopicState:
        topic = self.registry.get(role.topic)
        if topic is not None and topic_admin.stale_cluster_copy(topic, role.first_epoch,
                                                                role.config):
            log.warning("event=stale_copy_dropped topic=%s first_epoch=%d", role.topic,
                        role.first_epoch)       # of a deleted topic of the same name
            topic_admin.drop_topic(self.stager, self.registry, topic)
            self.leader.stop(role.topic)
            self.replicas.stop_following(role.topic)  # its fetch state goes with it
            topic = None
        if topic is None:
            topic = topic_admin.create_topic(self.stager, self.registry, role.topic,
                                             parse_config(role.config, role.topic))
        if topic.epochs is None:
            topic.epochs = EpochCache()
        if topic.hw is None:
            topic.hw = 0
        return topic

    # --- after a commit -----------------------------------------------------------------------

    def after_commit(self, woken: set[str]) -> set[str]:
        """The wake-ups of a commit: a leader's records wake its followers' parked fetches,
        and its readers only once the high watermark moves."""
        self.leader.committed(woken)
        out = {FETCH_PREFIX + name if self.replicas.kind(name) is ReplicaKind.LEADER
               else name for name in woken}
        out |= self.replicas.take_woken()
        out |= {PLACE_PREFIX + name for name in self.placements.take_woken()}
        return out

    def has_released(self) -> bool:
        return self.replicas.has_released()

    def take_released(self) -> list[Released]:
        """The answers let go since the last call (`acks: all` writes the watermark now
        covers, or that lost their leader; ops applied)."""
        return self.replicas.take_released()
