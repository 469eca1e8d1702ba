"""Cap and TTL retention of one topic (spec/api.md 9): which floors move, and the drop
accounting that keeps `count` and `bytes` equal to the live records.

Floors only rise. The records cap is seq-based (evict_floor = head - cap_records) and is
derived again after a restart, so it needs no log frame. TTL and byte-cap floors depend on
the clock and on sizes, so the shard logs them (an fsynced EvictWatermark) before they take
effect. A record's ts and size come from `read(topic, seq)`: a StoredRecord or None (hole).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.record_batch import PAYLOAD_BYTES
from topics_actors.shard.topic_state import TopicState
from topics_actors.storage import failpoint, frame_body
from topics_actors.storage.frame import envelope_payload_bytes
from topics_actors.storage.frame_types import FrameType

if TYPE_CHECKING:
    from topics_actors.shard.shard_core import ShardCore

Reader = Callable[[TopicState, int], object]


class Floors(NamedTuple):
    evict: int
    expiry: int

    @property
    def earliest(self) -> int:
        return max(self.evict, self.expiry) + 1


def record_size(rec) -> int:
    return envelope_payload_bytes(len(rec.envelope), rec.flags)


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


# --- in a shard's batch ---------------------------------------------------------------------

def stage(core: ShardCore, topic: TopicState) -> None:
    """Lazy cap/TTL retention (spec/api.md 9): plan the floors now, log a TTL or byte-cap
    advance as an fsynced EvictWatermark, raise them when the batch commits."""
    config = topic.config
    if not (config.ttl_ms or config.cap_records or config.cap_bytes):
        return
    if topic.name in core.batch.retention:
        return
    floors = plan(topic, core.read_record, core.clock())
    if floors == (topic.evict_floor, topic.expiry_floor):
        return
    logged = (floors.expiry > topic.expiry_floor or floors.evict > max(
        topic.evict_floor, records_cap_floor(topic)))
    if logged and config.logged:
        core._frame(FrameType.EVICT_WATERMARK, topic, frame_body.encode_evict(
            frame_body.EvictBody(floors.evict, floors.earliest, floors.expiry)))
    core.batch.retention[topic.name] = (topic, floors)


def stage_all(core: ShardCore) -> Callable[[object], dict]:
    """The reclaimer's pass: stage retention for every topic of the shard."""
    before = len(core.batch.retention)
    for topic in core.topics.values():
        stage(core, topic)
    staged = len(core.batch.retention) - before
    return lambda _info: {"topics": staged}


def admit(core: ShardCore, topic: TopicState, records: list) -> None:
    """discard "reject": refuse a batch the caps cannot hold, before any seq exists."""
    config = topic.config
    if config.discard != "reject" or not (config.cap_records or config.cap_bytes):
        return
    size = sum(r[PAYLOAD_BYTES] for r in records)
    if ((config.cap_records and len(records) > config.cap_records)
            or (config.cap_bytes and size > config.cap_bytes)):
        raise TopicsError("the batch alone exceeds the topic's cap",
                          ErrorCode.RECORD_TOO_LARGE,
                          {"topic": topic.name, "cap_records": config.cap_records,
                           "cap_bytes": config.cap_bytes})
    staged = core.batch.retention.get(topic.name)
    earliest = staged[1].earliest if staged else topic.earliest_seq()
    gone, gone_bytes = dropped(topic, core.read_record, earliest)
    pending = topic.next_seq - 1 - topic.head     # staged earlier in this batch
    count, live_bytes = topic.count - gone + pending, topic.bytes - gone_bytes
    if ((config.cap_records and count + len(records) > config.cap_records)
            or (config.cap_bytes and live_bytes + size > config.cap_bytes)):
        raise TopicsError(f"topic {topic.name!r} is full", ErrorCode.TOPIC_FULL,
                          {"topic": topic.name, "cap_records": config.cap_records,
                           "cap_bytes": config.cap_bytes, "head_seq": topic.head,
                           "earliest_seq": topic.earliest_seq()})
