"""Moving a topic's replicas between nodes, as pure functions of the facts (docs/CLUSTER.md
8): Kafka's partition reassignment, and a drain (JetStream's peer removal) as a move of
every topic off one node.

A move stores its target replica set in the topic's state (ReplicaState.target); the
controller then takes one step per pass (`step`), each a compare-and-swap of the state:

1. add the target's new nodes to `replicas`: their shards create a copy and follow the
   leader from seq 1, in the same leader epoch (the leader counts them from its next
   fetch);
2. wait until every node of the target is in the ISR (the leader adds a follower that has
   caught up, isr_tracker.py), so each holds every acknowledged record;
3. if the leader is leaving, make the first in-sync node of the target the leader, in a
   new epoch (a failover without a failure: waiting `acks: all` writes are answered in
   doubt and resent with their keys to the new leader, which answers their seqs);
4. make `replicas` the target (the ISR shrinks to it) and clear the target: the nodes that
   left stop following and drop their copies.

No step removes a node from the ISR before the target is wholly in it, so every record an
`acks: all` write was answered for stays on at least `min_isr` copies throughout. A new
move of the same topic replaces the target (moving back cancels one).
"""

from __future__ import annotations

import dataclasses

from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.errors import ErrorCode, TopicsError, invalid

REPLICAS_MAX = 7          # as replication_factor (topic_config.py)


def checked_target(topic: str, state: ReplicaState, target: list[str],
                   live: list[str]) -> tuple[str, ...]:
    """`target` as a move of `topic` may take it: distinct live nodes, as many as the
    topic has copies; invalid_request or not_enough_replicas otherwise."""
    if state.deleted:
        raise TopicsError(f"topic {topic!r} was deleted", ErrorCode.TOPIC_NOT_FOUND)
    if not isinstance(target, list) or not all(isinstance(n, str) and n for n in target):
        raise invalid("`replicas` must be a list of node ids")
    if len(set(target)) != len(target):
        raise invalid(f"`replicas` names a node twice: {target}")
    copies = len(state.target or state.replicas)
    if len(target) != copies:
        raise invalid(f"topic {topic!r} has {copies} copies: name {copies} nodes (a move "
                      f"keeps the replication factor)")
    gone = [node for node in target if node not in live]
    if gone:
        raise TopicsError(f"nodes {gone} are not live: a move needs registered nodes "
                          f"(live: {sorted(live)})", ErrorCode.NOT_ENOUGH_REPLICAS,
                          {"live": sorted(live)})
    return tuple(target)


def drain_targets(states: dict[str, ReplicaState], node: str,
                  live: list[str]) -> dict[str, tuple[str, ...]]:
    """The target of every topic with a copy on `node` (or moving onto it): `node`
    replaced by the live node holding the fewest copies that the topic is not on (ties:
    by id). not_enough_replicas, and nothing changed, when some topic has no such node."""
    others = sorted(n for n in live if n != node)
    load = {n: 0 for n in others}
    for state in states.values():
        for member in state.target or state.replicas:
            if member in load:
                load[member] += 1
    targets = {}
    for topic in sorted(states):
        state = states[topic]
        current = state.target or state.replicas
        if state.deleted or (node not in current and node not in state.replicas):
            continue
        kept = [n for n in current if n != node]
        spare = [n for n in others if n not in kept]
        if node in current:
            if not spare:
                raise TopicsError(
                    f"cannot drain {node!r}: topic {topic!r} has {len(current)} copies and "
                    f"no other live node is free for one (live: {sorted(live)})",
                    ErrorCode.NOT_ENOUGH_REPLICAS, {"topic": topic, "live": sorted(live)})
            pick = min(spare, key=lambda n: (load[n], n))
            load[pick] += 1
            kept.insert(current.index(node), pick)
        targets[topic] = tuple(kept)
    return targets


def step(state: ReplicaState, live: set[str], quarantined: set[str],
         controller_epoch: int) -> ReplicaState | None:
    """The controller's next step of a move under way, None when there is none now (no
    move, or waiting for a new replica to join the ISR, or for a leader)."""
    target = state.target
    if target is None or state.deleted or state.leader is None:
        return None
    added = tuple(n for n in target if n not in state.replicas)
    if added:
        return dataclasses.replace(state, replicas=state.replicas + added,
                                   controller_epoch=controller_epoch)
    if not all(node in state.isr for node in target):
        return None
    if state.leader not in target:
        heirs = [n for n in target if n in state.isr and n in live and n not in quarantined]
        if not heirs:
            return None
        return dataclasses.replace(state, leader=heirs[0],
                                   leader_epoch=state.leader_epoch + 1,
                                   controller_epoch=controller_epoch)
    return dataclasses.replace(state, replicas=target,
                               isr=tuple(n for n in target if n in state.isr), target=None,
                               controller_epoch=controller_epoch)


def moved(state: ReplicaState, target: tuple[str, ...]) -> ReplicaState | None:
    """The state with `target` stored; None when the topic is on those nodes in that order
    already. The same nodes in another order change only the preferred leader, at once (and
    end a move under way that has added no node yet)."""
    if set(target) == set(state.replicas):
        if target == state.replicas and state.target is None:
            return None
        return dataclasses.replace(state, replicas=target, target=None)
    return dataclasses.replace(state, target=target)
