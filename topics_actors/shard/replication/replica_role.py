"""One replicated topic's state as a shard holds it: what the supervisor sent in
`replica_roles` (protocol/control.py), with the leader's shard for this topic picked out."""

from __future__ import annotations

import dataclasses
import enum

from topics_actors.topic_identity import shard_of_name


@dataclasses.dataclass(frozen=True)
class Role:
    """One topic's replication state as the supervisor sent it."""
    topic: str
    leader: str | None
    leader_epoch: int
    isr: tuple[str, ...]
    replicas: tuple[str, ...]
    version: int
    config: dict
    leader_shard: str | None        # the leader's shard endpoint for this topic
    leader_front: str | None
    leader_http: str | None
    leader_curve: str | None = None  # the CURVE key its leader's shards serve under
    deleted: bool = False            # a tombstone: the topic was deleted
    first_epoch: int = 1             # where this incarnation of the name began
    target: tuple[str, ...] | None = None   # a move under way: the replicas it heads for

    @classmethod
    def from_wire(cls, raw: dict) -> "Role":
        shards = raw.get("leader_shards") or []
        shard = shards[shard_of_name(raw["topic"], len(shards))] if shards else None
        return cls(raw["topic"], raw.get("leader"), int(raw["leader_epoch"]),
                   tuple(raw["isr"]), tuple(raw["replicas"]), int(raw.get("version", 0)),
                   raw.get("config") or {}, shard, raw.get("leader_front"),
                   raw.get("leader_http"), raw.get("leader_curve"),
                   bool(raw.get("deleted", False)), int(raw.get("first_epoch", 1)),
                   tuple(raw["target"]) if raw.get("target") else None)

    def leaving(self, node: str) -> bool:
        """Whether a move under way takes `node`'s copy away (cluster/reassignment.py)."""
        return self.target is not None and node not in self.target

    def hint(self) -> dict:
        return {"topic": self.topic, "leader": self.leader, "leader_epoch": self.leader_epoch,
                "leader_front": self.leader_front, "leader_http": self.leader_http,
                "leader_curve": self.leader_curve}


class AnswerKind(enum.Enum):
    """Which request of this shard a leader's answer (ReplicaAnswer) is for."""
    EPOCH_QUERY = "epoch_query"
    REPLICA_FETCH = "replica_fetch"
