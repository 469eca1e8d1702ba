"""Topic configuration: defaults, validation and the echo form (spec/api.md section 3).

A PUT replaces the whole config: the body is laid over the defaults, never over the current
values. Unknown fields are ignored; wrong types and unknown enum strings are rejected.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import orjson

from topics_actors.errors import invalid
from topics_actors.topic_identity import valid_topic_name



class Acks(enum.StrEnum):
    """When an append to a replicated topic is answered (an Append's `acks`,
    docs/PROTOCOL.md): once the leader's own log holds it in its class, or once every
    in-sync replica does (nil on the wire: ALL)."""
    NONE = "none"
    LEADER = "leader"
    ALL = "all"

    @classmethod
    def of(cls, wire: str | None) -> "Acks":
        """The Append field as it crossed the wire; any other value is invalid_request."""
        if wire is None:
            return cls.ALL
        try:
            return cls(wire)
        except ValueError:
            raise invalid(f"acks must be one of {', '.join(cls)}") from None


class Durability(enum.StrEnum):
    """A topic's durability class (docs/DURABILITY.md): where its records live and when a
    write is acknowledged."""

    EPHEMERAL = "ephemeral"
    MEMORY = "memory"
    DISK = "disk"
    FSYNC = "fsync"

    # Plain attributes, set below for every member: these are asked once per record on the
    # hot paths (replay, staging), where a property costs several times an attribute.
    logged: bool             # records are written to the WAL (every class but ephemeral)
    acks_after_fsync: bool   # a write is acknowledged only once its fdatasync returned
    reserves_head: bool      # seqs are reserved ahead of the head (HeadWatermark), so an
    #                          unsynced tail lost in a machine crash leaves holes, never a
    #                          seq issued twice


for _member in Durability:
    _member.logged = _member is not Durability.EPHEMERAL
    _member.acks_after_fsync = _member is Durability.FSYNC
    _member.reserves_head = _member is Durability.DISK

DURABILITY_CLASSES = tuple(d.value for d in Durability)
TOPIC_TYPES = ("log", "queue")
DISCARD_POLICIES = ("old", "reject")

LEASE_MS_MIN = 100
LEASE_MS_MAX = 86_400_000
CLAIM_JITTER_MS_MAX = 5_000
U64_MAX = 2**64 - 1
REPLICATION_FACTOR_MAX = 7
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    type: str = "log"
    ttl_ms: int = 0
    cap_records: int = 0
    cap_bytes: int = 0
    discard: str = "old"
    durability: Durability = Durability.DISK
    priority: int | None = None
    auto_priority: bool = True
    auto_create: bool = True
    idempotency_window_ms: int = 120_000
    dedupe_node: bool = True
    lease_ms: int = 30_000
    claim_jitter_ms: int = 0
    max_deliveries: int = 0
    dead_letter: str | None = None
    leases_durable: bool = False
    replication_factor: int = 1        # copies on distinct nodes (a cluster: TOPICS_ZK)
    min_isr: int = 1                   # in-sync copies an `acks: all` write needs

    @property
    def replicated(self) -> bool:
        return self.replication_factor > 1

    @property
    def durable(self) -> bool:
        """The API's `durable` flag: the fsync class."""
        return self.durability.acks_after_fsync

    @property
    def logged(self) -> bool:
        """Whether records of this topic are written to the WAL."""
        return self.durability.logged

    def to_json(self) -> dict[str, Any]:
        """The 17-field echo of the /v0 API, durability resolved."""
        return {
            "type": self.type, "ttl_ms": self.ttl_ms, "cap_records": self.cap_records,
            "cap_bytes": self.cap_bytes, "discard": self.discard, "durable": self.durable,
            "durability": self.durability.value, "priority": self.priority,
            "auto_priority": self.auto_priority, "auto_create": self.auto_create,
            "idempotency_window_ms": self.idempotency_window_ms,
            "dedupe_node": self.dedupe_node, "lease_ms": self.lease_ms,
            "claim_jitter_ms": self.claim_jitter_ms, "max_deliveries": self.max_deliveries,
            "dead_letter": self.dead_letter, "leases_durable": self.leases_durable,
            **({"replication_factor": self.replication_factor, "min_isr": self.min_isr}
               if self.replicated else {}),
        }

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.to_json())

    @classmethod
    def from_bytes(cls, raw: bytes) -> "TopicConfig":
        return parse_config(orjson.loads(raw) if raw else {})


def _uint(body: dict, key: str, default: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise invalid(f"config field {key!r} must be a non-negative integer")
    return value


def _bool(body: dict, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"config field {key!r} must be a boolean")
    return value


def _choice(body: dict, key: str, default: str, choices: tuple[str, ...]) -> str:
    value = body.get(key, default)
    if value is None:
        return default
    if value not in choices:
        raise invalid(f"config field {key!r} must be one of {', '.join(choices)}")
    return value


def _priority(body: dict) -> int | None:
    value = body.get("priority")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not I32_MIN <= value <= I32_MAX:
        raise invalid("config field 'priority' must be a 32-bit integer or null")
    return value


def _durability(body: dict) -> Durability:
    if body.get("durability") is not None:
        return Durability(_choice(body, "durability", "disk", DURABILITY_CLASSES))
    return Durability.FSYNC if _bool(body, "durable", False) else Durability.DISK


def _dead_letter(body: dict, topic: str | None, topic_type: str) -> str | None:
    value = body.get("dead_letter")
    if value is None:
        return None
    if not valid_topic_name(value):
        raise invalid("config field 'dead_letter' must be a valid topic name")
    if topic_type == "queue" and value == topic:
        raise invalid("a queue cannot dead-letter into itself")
    return value


def parse_config(body: Any, topic: str | None = None) -> TopicConfig:
    """Validate a config body (a dict) laid over the defaults."""
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise invalid("config must be a JSON object")
    topic_type = _choice(body, "type", "log", TOPIC_TYPES)
    config = TopicConfig(
        type=topic_type,
        ttl_ms=_uint(body, "ttl_ms", 0),
        cap_records=_uint(body, "cap_records", 0),
        cap_bytes=_uint(body, "cap_bytes", 0),
        discard=_choice(body, "discard", "old", DISCARD_POLICIES),
        durability=_durability(body),
        priority=_priority(body),
        auto_priority=_bool(body, "auto_priority", True),
        auto_create=_bool(body, "auto_create", True),
        idempotency_window_ms=_uint(body, "idempotency_window_ms", 120_000),
        dedupe_node=_bool(body, "dedupe_node", True),
        lease_ms=min(LEASE_MS_MAX, max(LEASE_MS_MIN, _uint(body, "lease_ms", 30_000))),
        claim_jitter_ms=min(CLAIM_JITTER_MS_MAX, _uint(body, "claim_jitter_ms", 0)),
        max_deliveries=_uint(body, "max_deliveries", 0),
        dead_letter=_dead_letter(body, topic, topic_type),
        leases_durable=_bool(body, "leases_durable", False),
        **_replication(body),
    )
    if config.replicated and not config.logged:
        raise invalid("an ephemeral topic has one copy: replication_factor must be 1")
    if config.replicated and config.type == "queue":
        _replicated_queue(config)
    return config


def _replicated_queue(config: TopicConfig) -> None:
    """What a queue of several copies cannot do yet: move jobs to a dead-letter topic (a
    write into another topic, maybe led elsewhere), or gather claims in windows while its
    leases are replicated (a window's answers are not a request's)."""
    if config.dead_letter is not None:
        raise invalid("dead_letter needs replication_factor 1 (docs/CLUSTER.md)")
    if config.leases_durable and config.claim_jitter_ms:
        raise invalid("a replicated queue with leases_durable needs claim_jitter_ms 0 "
                      "(docs/CLUSTER.md)")


def _replication(body: dict) -> dict:
    """replication_factor 1..REPLICATION_FACTOR_MAX; min_isr 1..replication_factor, by
    default 2 from three copies on (one lost node never blocks `acks: all`), else 1."""
    factor = _uint(body, "replication_factor", 1)
    if not 1 <= factor <= REPLICATION_FACTOR_MAX:
        raise invalid(f"config field 'replication_factor' must be 1..{REPLICATION_FACTOR_MAX}")
    min_isr = _uint(body, "min_isr", 2 if factor >= 3 else 1)
    if not 1 <= min_isr <= factor:
        raise invalid("config field 'min_isr' must be 1..replication_factor")
    return {"replication_factor": factor, "min_isr": min_isr}
