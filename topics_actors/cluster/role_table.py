"""What a node's supervisor tells its shards about replicated topics: each topic's state as
ZooKeeper holds it, with where its leader's shards, front and HTTP port are (from the
leader's registration), and the ISR changes a leader may write itself."""

from __future__ import annotations

import dataclasses

from topics_actors.cluster.metadata_store import Versioned
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.errors import invalid
from topics_actors.topic_config import TopicConfig, parse_config


def roles(states: dict[str, Versioned], nodes: dict[str, dict]) -> list[dict]:
    """One map per topic, as the shards' ReplicaRoles carries them (sorted by topic)."""
    out = []
    for topic in sorted(states):
        state, version = states[topic]
        leader = nodes.get(state.leader) if state.leader is not None else None
        out.append({"topic": topic, "leader": state.leader,
                    "leader_epoch": state.leader_epoch, "isr": list(state.isr),
                    "replicas": list(state.replicas), "version": version,
                    "config": state.config or {}, "deleted": state.deleted,
                    "first_epoch": state.first_epoch,
                    "target": list(state.target) if state.target is not None else None,
                    "leader_shards": (leader or {}).get("shards") or [],
                    "leader_front": _front(leader), "leader_http": _http(leader),
                    "leader_curve": (leader or {}).get("curve_public")})
    return out


def peer_keys(nodes: dict[str, dict]) -> list[str]:
    """The CURVE public keys the registered nodes serve under (none without client keys):
    every node's shards admit the others' as peers."""
    return sorted({info["curve_public"] for info in nodes.values() if info.get("curve_public")})


def _front(info: dict | None) -> str | None:
    if not info or "zmq_port" not in info:
        return None
    return f"tcp://{info.get('advertise', '127.0.0.1')}:{info['zmq_port']}"


def _http(info: dict | None) -> str | None:
    if not info or "http_port" not in info:
        return None
    return f"{info.get('advertise', '127.0.0.1')}:{info['http_port']}"


def isr_changed(state: ReplicaState, node: str, leader_epoch: int,
                isr: list[str]) -> ReplicaState | None:
    """The state with a leader's new ISR, or None when the proposal is stale (another
    leader or epoch now) or malformed (the leader left out, a node that is no replica)."""
    if state.leader != node or state.leader_epoch != leader_epoch:
        return None
    if node not in isr or not set(isr) <= set(state.replicas):
        return None
    ordered = tuple(n for n in state.replicas if n in isr)
    if ordered == state.isr:
        return None
    return dataclasses.replace(state, isr=ordered)


def config_changed(topic_name: str, state: ReplicaState, node: str, leader_epoch: int,
                   config: dict) -> ReplicaState | None:
    """The state with a leader's new topic config, or None when the request is stale
    (another leader or epoch now) or changes nothing. Raises invalid_request for a config
    the topic cannot take (its shard checked it already: replica_rules.py)."""
    if state.leader != node or state.leader_epoch != leader_epoch or state.config == config:
        return None
    check_reconfig(topic_name, state.config or {}, config, len(state.replicas))
    return dataclasses.replace(state, config=config)


def deleted(state: ReplicaState, node: str, leader_epoch: int) -> ReplicaState | None:
    """The tombstone of a topic its leader deletes (no leader, the epoch bumped so the next
    incarnation of the name starts above it), or None when the request is stale."""
    if state.deleted or state.leader != node or state.leader_epoch != leader_epoch:
        return None
    return dataclasses.replace(state, deleted=True, leader=None, isr=(),
                               leader_epoch=state.leader_epoch + 1)


def check_reconfig(topic: str, before: dict, after: dict, copies: int) -> TopicConfig:
    """The new config of a placed topic, parsed; invalid_request when it changes the type
    or the number of copies (there is no reassignment)."""
    config = parse_config(after, topic)
    if config.type != parse_config(before, topic).type:
        raise invalid(f"the type of {topic!r} cannot change")
    if config.replication_factor != copies:
        raise invalid(f"the replication_factor of {topic!r} cannot change "
                      f"(it has {copies} copies)")
    return config
