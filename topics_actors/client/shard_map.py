"""The node's shard map as the front endpoint reports it, and topic routing."""

from __future__ import annotations

import dataclasses

from topics_actors.topic_identity import shard_of_name

DEFAULT_ENDPOINT = "tcp://127.0.0.1:4001"      # the front of a node started with defaults


@dataclasses.dataclass(frozen=True)
class ShardMap:
    shard_count: int
    endpoints: tuple[str, ...]
    incarnations: tuple[int, ...]
    states: tuple[str, ...]
    node_ready: bool
    ipcs: tuple[str, ...] = ()      # each shard's ipc endpoint, for processes of the node

    @classmethod
    def from_status(cls, status: dict) -> "ShardMap":
        shards = sorted(status["shards"], key=lambda s: s["shard"])
        return cls(status["shard_count"], tuple(s["endpoint"] for s in shards),
                   tuple(s["incarnation"] for s in shards), tuple(s["state"] for s in shards),
                   bool(status["node_ready"]), tuple(s.get("ipc", "") for s in shards))

    def shard_for(self, topic: str) -> int:
        return shard_of_name(topic, self.shard_count)

    def serving(self, shard: int) -> bool:
        return self.states[shard] == "ready" and bool(self.endpoints[shard])
