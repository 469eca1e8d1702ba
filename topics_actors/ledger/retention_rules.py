"""The rules of cap and TTL retention of one topic (spec/api.md 9): which floors move, and
the drop accounting that keeps `count` and `bytes` equal to the live records.

Floors only rise. The records cap is seq-based (evict_floor = head - cap_records) and is
derived again after a restart, so it needs no log frame. TTL and byte-cap floors depend on
the clock and on sizes, so the shard logs them (an fsynced EvictWatermark) before they take
effect. A record's ts and size come from `read(topic, seq)`: a StoredRecord or None (hole).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage import failpoint
from topics_actors.record_envelope import payload_bytes

Reader = Callable[[TopicState, int], object]


class Floors(NamedTuple):
    evict: int
    expiry: int

    @property
    def earliest(self) -> int:
        return max(self.evict, self.expiry) + 1


def record_size(rec) -> int:
    return payload_bytes(len(rec.envelope), rec.flags)


def plan(topic: TopicState, read: Reader, now_ms: int) -> Floors:
    """The floors the topic's config asks for now (never below the current ones)."""
    config, head = topic.config, topic.head
    evict = max(topic.evict_floor, records_cap_floor(topic))
    expiry = topic.expiry_floor
    if config.ttl_ms:
        seq = max(topic.earliest_seq(), evict + 1)
        while seq <= head:
            rec = read(topic, seq)
            if rec is not None:
                if now_ms - rec.ts <= config.ttl_ms:
                    break
                expiry = seq
            seq += 1
    if config.cap_bytes:
        evict = _bytes_floor(topic, read, evict, expiry)
    return Floors(evict, expiry)


def _bytes_floor(topic: TopicState, read: Reader, evict: int, expiry: int) -> int:
    """Evict the oldest live records while the live bytes exceed cap_bytes."""
    live = topic.bytes - dropped(topic, read, max(evict, expiry) + 1)[1]
    seq = max(topic.earliest_seq(), evict + 1, expiry + 1)
    while live > topic.config.cap_bytes and seq <= topic.head:
        rec = read(topic, seq)
        if rec is not None:
            live -= record_size(rec)
            evict = max(evict, seq)
        seq += 1
    return evict


def dropped(topic: TopicState, read: Reader, earliest: int) -> tuple[int, int]:
    """(count, bytes) of the live records that moving the floors to `earliest` would drop."""
    count = total = 0
    for seq in range(max(topic.gone_through + 1, 1), min(earliest, topic.head + 1)):
        rec = read(topic, seq)
        if rec is not None:
            count += 1
            total += record_size(rec)
    return count, total


def apply(topic: TopicState, read: Reader, floors: Floors) -> int:
    """Raise the floors and account for the records now gone; returns how many went."""
    failpoint.hit("retention::before_apply")
    if max(floors.evict, floors.expiry) > topic.head:
        raise InvariantViolation(f"{topic.name!r}: retention floors {floors} past its head "
                                 f"{topic.head} (records not yet written would be gone)")
    topic.evict_floor = max(topic.evict_floor, floors.evict)
    topic.expiry_floor = max(topic.expiry_floor, floors.expiry)
    return drop_below(topic, read, topic.earliest_seq())


def drop_below(topic: TopicState, read: Reader, earliest: int) -> int:
    """Take the live records below `earliest` out of count and bytes (once each)."""
    count, total = dropped(topic, read, earliest)
    topic.count -= count
    topic.bytes -= total
    topic.gone_through = max(topic.gone_through, min(earliest, topic.head + 1) - 1)
    return count


def records_cap_floor(topic: TopicState) -> int:
    cap = topic.config.cap_records
    return topic.head - cap if cap and topic.head > cap else 0


def settle(topic: TopicState, read: Reader) -> None:
    """After a publish or a recovery: the records cap follows the head (no frame needed:
    it is derived again after a restart), and the accounting follows the floors."""
    topic.evict_floor = max(topic.evict_floor, records_cap_floor(topic))
    drop_below(topic, read, topic.earliest_seq())
