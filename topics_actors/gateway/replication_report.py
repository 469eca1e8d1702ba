"""The node's replication figures, gathered from its shards' statuses (each shard reports
the topics it leads, shard/replication/replica_book.py): for /v0/metrics and for the
follower lag that GET /v0/cluster adds to the supervisor's view."""

from __future__ import annotations

import dataclasses

COUNTS = ("replicated_topics", "leading", "following", "under_replicated", "leader_changes",
          "acks_waiting", "ops_pending", "copies_truncated", "copies_reset")


@dataclasses.dataclass
class Replication:
    counts: dict = dataclasses.field(default_factory=dict)
    led: dict = dataclasses.field(default_factory=dict)   # topic -> {isr, replicas, lag}

    @property
    def enabled(self) -> bool:
        return bool(self.counts)


def gather(statuses: list[dict]) -> Replication:
    found = Replication()
    for status in statuses:
        part = status.get("replication")
        if part is None:
            continue
        for name in COUNTS:
            found.counts[name] = found.counts.get(name, 0) + part.get(name, 0)
        found.led.update(part.get("led", {}))
    return found


def with_lag(cluster: dict, found: Replication) -> dict:
    """The cluster view with `followers: {node: {lag}}` on each topic this node leads."""
    topics = {}
    for name, view in cluster.get("topics", {}).items():
        led = found.led.get(name)
        topics[name] = view if led is None else {
            **view, "followers": {node: {"lag": lag} for node, lag in led["lag"].items()}}
    return {**cluster, "topics": topics}
