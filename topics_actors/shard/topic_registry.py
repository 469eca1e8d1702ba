"""The topics a shard serves: by name, by id and in name order, and which ids it owns.

A topic's id is a stable hash of its name; the shard owning it is that id modulo the shard
count (topic_identity.py), so ownership is a pure function, cached per id because recovery
asks it once per frame.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.topic_state import TopicState
from topics_actors.shard import ram_buffer
from topics_actors.topic_identity import shard_of

OWNED_CACHE_MAX = 1_000_000


class TopicRegistry:
    def __init__(self, shard: int, shard_count: int):
        self.shard = shard
        self.shard_count = shard_count
        self.topics: dict[str, TopicState] = {}
        self.by_tid: dict[int, TopicState] = {}
        self.names: list[str] = []          # sorted, for listing pages
        self._owned: dict[int, bool] = {}

    def __len__(self) -> int:
        return len(self.topics)

    def __iter__(self) -> Iterator[TopicState]:
        return iter(self.topics.values())

    def get(self, name: str) -> TopicState | None:
        return self.topics.get(name)

    def owns(self, tid: int) -> bool:
        owned = self._owned.get(tid)
        if owned is None:
            if len(self._owned) >= OWNED_CACHE_MAX:
                self._owned.clear()
            owned = self._owned[tid] = shard_of(tid, self.shard_count) == self.shard
        return owned

    def register(self, topic: TopicState) -> None:
        other = self.by_tid.get(topic.tid)
        if other is not None and other.name != topic.name:
            raise InvariantViolation(f"topic id {topic.tid} of {topic.name!r} already names "
                                     f"{other.name!r}")
        self.topics[topic.name] = topic
        self.by_tid[topic.tid] = topic
        index = bisect.bisect_left(self.names, topic.name)
        if index == len(self.names) or self.names[index] != topic.name:
            self.names.insert(index, topic.name)

    def unregister(self, topic: TopicState) -> None:
        if self.topics.get(topic.name) is topic:
            del self.topics[topic.name]
            self.by_tid.pop(topic.tid, None)
            index = bisect.bisect_left(self.names, topic.name)
            if index < len(self.names) and self.names[index] == topic.name:
                del self.names[index]

    def page(self, prefix: str, after: str, limit: int) -> tuple[list[TopicState], bool]:
        """Up to `limit` topics named after `after` and starting with `prefix`, in name
        order, and whether more follow."""
        names = self.names
        start = bisect.bisect_right(names, after) if after else 0
        if prefix:
            start = max(start, bisect.bisect_left(names, prefix))
        page = []
        for name in names[start:start + limit + 1]:
            if not name.startswith(prefix):
                break
            page.append(name)
        return [self.topics[name] for name in page[:limit]], len(page) > limit

    def live_bytes(self) -> int:
        return sum(topic.bytes for topic in self.topics.values())

    def ram_bytes(self) -> int:
        """Bytes of the RAM chunks that hold ephemeral topics' records."""
        return sum(ram_buffer.ram_bytes(topic) for topic in self.topics.values()
                   if topic.ram is not None)
