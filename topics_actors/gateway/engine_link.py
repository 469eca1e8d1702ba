"""The gateway's way to the engine: a NodeClient to the node's front and its shards (on
their ipc sockets, which trust the gateway's prevalidated appends), and node-wide figures
(topic count, live records and bytes) gathered from the shards and kept for a short while,
so a quota check does not ask every shard on every request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from topics_actors.client.async_client import AsyncClient, NodeClient
from topics_actors.errors import TopicsError
from topics_actors.limits import LIST_PAGE_SIZE_MAX
from topics_actors.server_keys import ServerKeys
from topics_actors.topic_config import DURABILITY_CLASSES

CENSUS_PAGES_MAX = 1_000            # at most this many list pages per census (1M topics)
TOPIC_SERIES_MAX = 1_000            # per-topic metric series (spec/api.md 10)
QUOTA_MAX_AGE_S = 1.0       # how stale the topic count and live bytes of a cap check may be


@dataclasses.dataclass
class Census:
    """Node-wide topic figures at `taken_s` (monotonic)."""
    topics: int = 0
    by_class: dict = dataclasses.field(
        default_factory=lambda: dict.fromkeys(DURABILITY_CLASSES, 0))
    records_live: int = 0
    bytes_live: int = 0
    series: list = dataclasses.field(default_factory=list)   # first TOPIC_SERIES_MAX items
    truncated: bool = False
    taken_s: float = 0.0
    queue_topics: int = 0
    queue_leases_in_flight: int = 0

    def add(self, items: list[dict]) -> None:
        for item in items:
            self.topics += 1
            queue = item.get("queue")
            if queue is not None:
                self.queue_topics += 1
                self.queue_leases_in_flight += queue["in_flight"]
            klass = item.get("durability")
            if klass in self.by_class:
                self.by_class[klass] += 1
            self.records_live += item["count"]
            self.bytes_live += item["bytes"]
            if len(self.series) < TOPIC_SERIES_MAX:
                self.series.append(item)
            else:
                self.truncated = True


class EngineLink:
    def __init__(self, front: str, request_timeout_ms: int = 5_000,
                 retry_deadline_ms: int = 3_000, max_in_flight: int = 1_024,
                 node_keys: ServerKeys | None = None):
        """`node_keys`: the node's CURVE key pair (a cluster serving CURVE), shown to the
        other nodes' fronts this gateway forwards to (they admit it as a peer)."""
        curve = {} if node_keys is None else {
            "curve_server_key": node_keys.public, "curve_public_key": node_keys.public,
            "curve_secret_key": node_keys.secret}
        self.client = NodeClient(front, request_timeout_ms=request_timeout_ms,
                                 retry_deadline_ms=retry_deadline_ms,
                                 max_in_flight=max_in_flight, **curve)
        self._curve = curve
        self._topics: tuple[int, float] = (0, -1e9)   # (count, taken at)
        self._census = Census(taken_s=-1e9)
        self._census_lock = asyncio.Lock()

    async def close(self) -> None:
        await self.client.close()

    def ipc_of(self, topic: str) -> str:
        return self.client.ipc_of(topic)

    async def call(self, topic: str | None, msg, wait_ms: int = 0) -> dict:
        return await self.client.request(topic, msg, wait_ms)

    async def call_node(self, front: str, server_key: str | None, topic: str, msg) -> dict:
        """`msg` answered by another node of the cluster itself (its front at `front`,
        serving CURVE under `server_key` when the cluster does), not by the topic's leader:
        an operator's question to one copy (copy_compare.py)."""
        curve = self._curve and {**self._curve, "curve_server_key": server_key}
        client = AsyncClient(front, request_timeout_ms=self.client.request_timeout_ms,
                             retry_deadline_ms=self.client.retry_deadline_ms, route=False,
                             **curve)
        try:
            return await client.request(topic, msg)
        finally:
            await client.close()

    async def node_request(self, msg) -> dict:
        """`msg` answered by this node itself, not a shard (a move: supervisor's cluster
        member)."""
        return await self.client.node_request(msg)

    async def drive(self, steps) -> dict:
        """Run a router operation (client/router_admin.py) through the client."""
        return await self.client.drive(steps)

    async def list_topics(self, prefix: str, page_size: int | None, cursor: str | None,
                          touch: bool) -> dict:
        return await self.client.list_topics(prefix, page_size, cursor, touch)

    async def node_status(self) -> dict:
        """The front's shard map: node_ready, replay_progress, shards, processes."""
        return await self.client.status()

    async def shard_statuses(self) -> list[dict]:
        return await self.client.shard_statuses()

    async def topic_count(self, max_age_s: float) -> int:
        count, taken = self._topics
        if time.monotonic() - taken > max_age_s:
            count = sum(s["topics"] for s in await self.client.shard_statuses())
            self._topics = (count, time.monotonic())
        return count

    def topic_created(self) -> None:
        count, taken = self._topics
        self._topics = (count + 1, taken)

    async def census(self, max_age_s: float) -> Census:
        """Every topic's figures, paged through the shards (one census at a time)."""
        async with self._census_lock:
            if time.monotonic() - self._census.taken_s <= max_age_s:
                return self._census
            census, cursor = Census(), None
            for _ in range(CENSUS_PAGES_MAX):
                page = await self.client.list_topics("", LIST_PAGE_SIZE_MAX, cursor, False)
                census.add(page["topics"])
                cursor = page.get("next_cursor")
                if not cursor:
                    break
            census.taken_s = time.monotonic()
            self._census = census
            return census


async def node_ready(link: EngineLink) -> tuple[bool, float]:
    """(ready, replay progress); a node that does not answer is not ready."""
    try:
        status = await link.node_status()
    except TopicsError:
        return False, 0.0
    return bool(status["node_ready"]), float(status["replay_progress"])
