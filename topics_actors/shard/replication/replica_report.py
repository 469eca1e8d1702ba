"""What a shard tells of its replicated topics (docs/CLUSTER.md 9): the `replication` member
of a topic's state and of the shard's status, read off its replica book."""

from __future__ import annotations

from topics_actors.shard.replication.replica import ReplicaKind
from topics_actors.shard.replication.replica_book import ReplicaBook

SERIES_MAX = 1_000            # topics with per-topic figures in a shard's status


def view(book: ReplicaBook, name: str) -> dict | None:
    """The `replication` member of a topic's state."""
    role = book.role(name)
    if role is None:
        return None
    topic = book.registry.get(name)
    view = {"leader": role.leader, "leader_epoch": role.leader_epoch,
            "isr": list(role.isr), "replicas": list(role.replicas),
            "hw": topic.visible if topic is not None else None}
    lead = book.replicas.lead(name)
    if lead is not None:
        tracker, now = lead.tracker, book.clock_ms()
        view["followers"] = {
            node: {"leo": p.leo, "lag": max(0, tracker.leader_leo - max(p.leo, 1)),
                   "last_fetch_ms_ago": now - p.last_fetch_ms}
            for node, p in tracker.followers.items()}
    return view


def figures(book: ReplicaBook) -> dict:
    """The shard status's `replication` member (nothing on a single node): counts, and
    per topic it leads its ISR size and each follower's lag in records (the first
    SERIES_MAX topics by name)."""
    if not book.enabled:
        return {}
    replicas, led = book.replicas, {}
    for name in replicas.leading()[:SERIES_MAX]:
        tracker = replicas.lead(name).tracker
        led[name] = {"isr": len(tracker.isr), "replicas": len(tracker.replicas),
                     "lag": {node: max(0, tracker.leader_leo - max(p.leo, 1))
                             for node, p in tracker.followers.items()}}
    return {"replication": {
        "replicated_topics": len(replicas), "leading": replicas.count(ReplicaKind.LEADER),
        "following": replicas.count(ReplicaKind.FOLLOWER),
        "leader_changes": book.leader.leader_changes,
        "copies_truncated": book.cut.truncated, "copies_reset": book.cut.resets,
        "under_replicated": sum(1 for _name, lead in replicas.led()
                                if len(lead.tracker.isr) < len(lead.tracker.replicas)),
        "acks_waiting": sum(lead.waiting() for _name, lead in replicas.led()),
        "ops_pending": sum(len(t.ops.pending) for name in replicas.names()
                           if (t := book.registry.get(name)) is not None and t.ops),
        "led": led}}
