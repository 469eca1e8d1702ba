"""The shard's side of the head table (protocol/head_table.py): which topics hold a slot,
and their heads written there at every commit that may move them.

A topic gets a slot when a diff reads it (the reply tells the gateway where), if a caught-up
read of it is answered by its head and earliest seq alone:
- not a queue (acks delete jobs, moving the earliest seq outside any append);
- no TTL and no byte cap (retention is planned lazily: a read's own plan may raise the
  floor, by the clock or by the sizes the last append added; a records cap follows the
  head and is always current);
- no high watermark (a replicated copy shows readers less than its head);
- not quarantined.
A cluster node keeps no table: its topics move between nodes and roles (ShardCore).

The commit hands over the names its batch touched (staged, retained, deleted); a slot whose
topic is gone, replaced or no longer eligible is freed (tid 0), so a gateway falls back to
the shard. Slots are given out until SLOTS_MAX are in use; a topic beyond that is read from
the shard as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol import head_table
from topics_actors.protocol.head_table import HeadTable, Slot


def eligible(topic: TopicState) -> bool:
    config = topic.config
    return (config.type != "queue" and not config.ttl_ms and not config.cap_bytes
            and topic.hw is None)


class HeadBoard:
    def __init__(self, path: str, quarantined: Callable[[str], bool]):
        self._map = head_table.map_table(path, create=True)
        self.table = HeadTable(self._map)
        self.incarnation = self.table.begin()
        self._quarantined = quarantined
        self._slots: dict[str, int] = {}
        self._free: list[int] = []
        self._next = 0

    def claim(self, topic: TopicState) -> Slot | None:
        """The topic's place in the table, published now; None if it cannot have one."""
        slot = self._slots.get(topic.name)
        if slot is None:
            if not eligible(topic) or self._quarantined(topic.name):
                return None
            slot = self._take_slot()
            if slot is None:
                return None
            self._slots[topic.name] = slot
            self.table.clear_read_ms(slot)
            self._write(topic, slot)
        return self.incarnation, slot, topic.tid

    def _take_slot(self) -> int | None:
        if self._free:
            return self._free.pop()
        if self._next >= head_table.SLOTS_MAX:
            return None
        self._next += 1
        return self._next - 1

    def _write(self, topic: TopicState, slot: int) -> None:
        self.table.write(slot, topic.tid, topic.visible, topic.earliest_seq())

    def refresh(self, get: Callable[[str], TopicState | None],
                *names: Iterable[str]) -> None:
        """After a commit: write the slots of the topics `names` lists (several iterables,
        so the commit need not join them) again, or free those whose topic is gone,
        replaced by another of the name, or no longer eligible."""
        slots = self._slots
        if not slots:
            return
        for some in names:
            for name in some:
                slot = slots.get(name)
                if slot is None:
                    continue
                topic = get(name)
                if topic is None or not eligible(topic) or self._quarantined(name):
                    self._drop(name, slot)
                else:
                    self._write(topic, slot)

    def refresh_all(self, get: Callable[[str], TopicState | None]) -> None:
        """Every slot again (after a snapshot is absorbed, or the audit quarantined or
        repaired a topic: rare events that touch topics outside any batch)."""
        self.refresh(get, list(self._slots))

    def _drop(self, name: str, slot: int) -> None:
        del self._slots[name]
        self.table.write(slot, 0, 0, 0)
        self._free.append(slot)

    def fold_read_ms(self, topic: TopicState) -> None:
        """Take the gateways' reads of the topic from the table into its last_read_ts."""
        slot = self._slots.get(topic.name)
        if slot is not None:
            read_ms = self.table.read_ms(slot)
            if read_ms > (topic.last_read_ts or 0):
                topic.last_read_ts = read_ms

    def close(self) -> None:
        self.table.release()
        self._map.close()
