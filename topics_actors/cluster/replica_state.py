"""The replication state of one topic, as the controller writes it: who leads, in which
epoch, which replicas are in sync.

Stored as one JSON object per topic and changed only by a versioned compare-and-swap
fenced by the controller epoch (cluster/metadata_store.py), so two controllers can never
both win a leader change.

A deleted topic leaves a tombstone (`deleted`, no leader, its epoch bumped) so that a node
that was away learns of the deletion; creating the name again replaces the tombstone with
a state whose epochs start above every epoch of the deleted one (`first_epoch`), so a copy
of the old topic is never taken for one of the new (replica_book.py).

A reassignment (cluster/reassignment.py) stores the replica set the topic is moving to in
`target`; the controller adds its new members to `replicas`, waits until each is in the ISR,
moves leadership onto a member of the target, then makes `replicas` the target and clears it.
"""

from __future__ import annotations

import dataclasses

import orjson

from topics_actors.errors import invalid


@dataclasses.dataclass(frozen=True)
class ReplicaState:
    replicas: tuple[str, ...]           # every node that holds a copy, preferred leader first
    isr: tuple[str, ...]                # in-sync replicas (the leader is always one)
    leader: str | None                  # None: offline, no eligible replica
    leader_epoch: int                   # bumped by every leader change, never reused
    controller_epoch: int               # the controller generation that wrote this
    config: dict | None = None          # the topic's config, as its replicas create it
    deleted: bool = False               # a tombstone: the topic was deleted
    first_epoch: int = 1                # the leader epoch this incarnation of the name began
    target: tuple[str, ...] | None = None   # a reassignment under way: the replicas wanted

    def to_bytes(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))

    @classmethod
    def from_bytes(cls, raw: bytes) -> "ReplicaState":
        try:
            fields = orjson.loads(raw)
            return cls(tuple(fields["replicas"]), tuple(fields["isr"]), fields["leader"],
                       int(fields["leader_epoch"]), int(fields["controller_epoch"]),
                       fields.get("config"), bool(fields.get("deleted", False)),
                       int(fields.get("first_epoch", 1)),
                       tuple(fields["target"]) if fields.get("target") else None)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise invalid(f"unreadable replica state: {exc}") from exc

    def view(self) -> dict:
        """The `replication` member of GET /v0/topics/:t (the high watermark is the
        leader's to add)."""
        view = {"leader": self.leader, "leader_epoch": self.leader_epoch,
                "isr": list(self.isr), "replicas": list(self.replicas)}
        if self.target is not None:
            view["target"] = list(self.target)
        return view
