"""Caught-up diffs answered by the gateway from the shards' head tables
(protocol/head_table.py), without a message to the shard.

A diff the shard answers carries `head_slot` when the shard publishes the topic's head; the
gateway keeps where (a bounded map of topic -> table and slot). The next diff of that
topic whose cursor is at the head it finds there, with no wait, node filter or routers to
settle, is answered here: no records, caught up, the head and earliest seq the shard
wrote at its last commit. Anything else, or a slot that no longer holds the topic in the
shard's current run, goes to the shard as before. The reply it would have given is the
same (tests/unit/test_head_table.py compares them after every kind of change).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from topics_actors.protocol import head_table
from topics_actors.protocol.head_table import HeadTable

PLACES_MAX = 65_536         # topics whose slot a gateway remembers
TABLES_MAX = 64             # shards of a node (one table each)


class HeadReads:
    def __init__(self, ipc_of: Callable[[str], str] | None):
        """`ipc_of`: the ipc endpoint of a topic's shard ("" when unknown); None: no
        table is used (a gateway not on the shards' machine, or a cluster node)."""
        self._ipc_of = ipc_of
        self.enabled = ipc_of is not None and head_table.supported()
        self._tables: dict[str, HeadTable] = {}
        self._places: dict[str, tuple[HeadTable, tuple[int, int, int]]] = {}
        self.answered = 0

    def page(self, topic: str, from_seq: int) -> dict | None:
        """The diff reply at `from_seq` if it is the topic's head as published; else None."""
        found = self._places.get(topic)
        if found is None:
            return None
        table, place = found
        heads = table.read(place)
        if heads is None:
            del self._places[topic]
            return None
        head, earliest = heads
        if from_seq != head:
            return None
        table.touch(place[1], time.time_ns() // 1_000_000)
        self.answered += 1
        return {"topic": topic, "records": [], "next_from_seq": head, "head_seq": head,
                "earliest_seq": earliest, "caught_up": True, "tombstone": None, "lag": 0,
                "records_scanned": 0,
                "performance": {"wal_append_ms": 0.0, "fsync_ms": 0.0}}

    def learn(self, topic: str, reply: dict) -> None:
        """Keep (or forget) where the topic's head is published, from a shard's diff reply."""
        place = reply.get("head_slot")
        if place is None:
            self._places.pop(topic, None)
            return
        table = self._table(topic)
        if table is None:
            return
        if topic not in self._places and len(self._places) >= PLACES_MAX:
            del self._places[next(iter(self._places))]
        self._places[topic] = (table, tuple(place))

    def _table(self, topic: str) -> HeadTable | None:
        path = head_table.heads_path(self._ipc_of(topic)) if self._ipc_of else ""
        if not path:
            return None
        table = self._tables.get(path)
        if table is None and len(self._tables) < TABLES_MAX:
            mapped = head_table.map_table(path, create=False)
            if mapped is not None:
                table = self._tables[path] = HeadTable(mapped)
        return table
