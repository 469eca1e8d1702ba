"""Control kinds between child processes and the supervisor (DEALER -> ROUTER).

A child sends Hello once its sockets are bound, then Heartbeat at least every
`heartbeat_interval_ms`; the supervisor replies to neither. A child that stops heartbeating
for `heartbeat_timeout_ms` is killed and restarted.
"""

from __future__ import annotations

from topics_actors.config import ProcessRole, ProcessState
from topics_actors.protocol.envelope import Message, message


@message
class Hello(Message):
    """child -> supervisor. role: a ProcessRole ("shard", "compactor", "reclaimer",
    "gateway"); index: shard number; endpoint: the tcp:// endpoint it serves clients on;
    ipc: its ipc:// endpoint for processes of the node."""
    KIND = "hello"
    role: ProcessRole
    index: int
    pid: int
    endpoint: str = ""
    ipc: str = ""


@message
class Heartbeat(Message):
    """child -> supervisor. state: a ProcessState ("replaying" | "ready" | "stopping");
    replay_progress in [0, 1], monotone while replaying; quarantined: a shard's quarantined
    topics (a cluster never makes this node their leader); unsettled: {topic: leader epoch}
    of a shard's replicated copies that recovered in that epoch and may not lead in it (a
    cluster gives a topic whose leader reports one a new epoch)."""
    KIND = "heartbeat"
    role: ProcessRole
    index: int
    pid: int
    state: ProcessState
    replay_progress: float = 0.0
    quarantined: list | None = None
    unsettled: dict | None = None


@message
class ReplicaRoles(Message):
    """supervisor -> shard (a cluster node). The replication state of replicated topics,
    one map per topic: {topic, leader, leader_epoch, isr, replicas, version, config,
    leader_shards: [tcp endpoint], leader_front, leader_http, target (the replicas a move
    heads for, nil: none)}; each shard takes the topics
    it owns. `complete`: the list holds every replicated topic (topics absent from it are
    no longer replicated here). `fenced`: the node's ZooKeeper session is not connected,
    so its leaders must not acknowledge `acks: all` writes (another node may lead now).
    `refused`: {topic: reason} of recent placements that could not be made; `absent`:
    {topic: asked_ns} of names recently looked up (a place_topic with create false) that
    had no state when the lookup asked at `asked_ns` was read.
    `peer_keys`: the CURVE public keys (Z85) the cluster's nodes registered (client keys
    configured): a shard admits them on its TCP socket as other nodes' shards, and each
    role's `leader_curve` is the key its leader's shards serve under. `settled`: indexes of
    the shards this supervisor restarted (a process crash loses no byte written: their
    copies may lead again in the epoch they recovered in)."""
    KIND = "replica_roles"
    roles: list
    complete: bool = False
    fenced: bool = False
    refused: dict | None = None
    peer_keys: list | None = None
    absent: dict | None = None
    settled: list | None = None


@message
class IsrChange(Message):
    """leader shard -> supervisor. Write `isr` as the in-sync replicas of `topic`, if this
    node still leads it in `leader_epoch` and the state is still at `version`."""
    KIND = "isr_change"
    role: ProcessRole
    index: int
    pid: int
    topic: str
    leader_epoch: int
    version: int
    isr: list


@message
class PlaceTopic(Message):
    """shard -> supervisor. Create `topic` with `config` in the cluster unless it exists
    (with `create` false: only look it up, reading ZooKeeper afresh); the answer comes back
    in `replica_roles`. `asked_ns`: when the shard asked (CLOCK_MONOTONIC, shared by the
    node's processes), echoed in an `absent` answer so an older one never answers it."""
    KIND = "place_topic"
    role: ProcessRole
    index: int
    pid: int
    topic: str
    config: dict
    create: bool = True
    asked_ns: int = 0


@message
class TopicChange(Message):
    """leader shard -> supervisor. Write a change of placed `topic` into its cluster state,
    if this node still leads it in `leader_epoch`: `config` as its new config, or with
    `delete` its deletion (a tombstone). The answer comes back in `replica_roles`: every
    replica takes the change from there."""
    KIND = "topic_change"
    role: ProcessRole
    index: int
    pid: int
    topic: str
    leader_epoch: int
    config: dict | None = None
    delete: bool = False
