"""The node's shard map as the front endpoint reports it, and topic routing."""

from __future__ import annotations

import dataclasses

from topics_actors.config import NodeConfig, ProcessState
from topics_actors.errors import invalid
from topics_actors.topic_identity import shard_of_name

DEFAULT_ENDPOINT = f"tcp://{NodeConfig.host}:{NodeConfig().front_port()}"   # a default node's front
FRONT = -1      # the target of a request sent to the front (forwarding mode, `status`)


@dataclasses.dataclass(frozen=True)
class ShardMap:
    shard_count: int
    endpoints: tuple[str, ...]
    incarnations: tuple[int, ...]
    states: tuple[ProcessState, ...]
    node_ready: bool
    ipcs: tuple[str, ...] = ()      # each shard's ipc endpoint, for processes of the node

    @classmethod
    def from_status(cls, status: dict) -> "ShardMap":
        shards = sorted(status["shards"], key=lambda s: s["shard"])
        return cls(status["shard_count"], tuple(s["endpoint"] for s in shards),
                   tuple(s["incarnation"] for s in shards),
                   tuple(ProcessState(s["state"]) for s in shards),
                   bool(status["node_ready"]), tuple(s.get("ipc", "") for s in shards))

    def shard_for(self, topic: str) -> int:
        return shard_of_name(topic, self.shard_count)

    def serving(self, shard: int) -> bool:
        return self.states[shard] == ProcessState.READY and bool(self.endpoints[shard])

    def endpoint(self, shard: int, local: bool) -> str:
        """The shard's endpoint: its ipc one for a process of the node (`local`) while the
        map names one, else TCP."""
        return (self.ipcs[shard] if local else "") or self.endpoints[shard]

    def target(self, route: bool, topic: str | None, shard: int | None) -> int | None:
        """Where a request goes: FRONT when the client does not route (the front forwards
        it), else the owning (or the given) shard; None while that shard is not serving."""
        if not route:
            return FRONT
        target = shard if shard is not None else self.shard_for(topic)
        return target if self.serving(target) else None

    def fan_out(self, route: bool) -> list[int | None]:
        """The `shard` argument of each request of a request sent to the whole node
        (list_topics): one per shard, or one to the front, which asks them all."""
        return list(range(self.shard_count)) if route else [None]


def routing_only(route: bool, what: str) -> None:
    """Refuse a request addressed to one shard from a client that does not route."""
    if not route:
        raise invalid(f"{what} needs a routing client (route=True): the front does not "
                      f"forward requests addressed to one shard")
