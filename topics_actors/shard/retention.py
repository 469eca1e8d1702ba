"""Cap and TTL retention in a shard's batch (the rules are ledger/retention_rules.py).

Retention is lazy (spec/api.md 9): a topic's floors are planned when it is written or read
and by the reclaimer's periodic `retain`. A TTL or byte-cap advance depends on the clock and
on sizes, so it is logged as an fsynced EvictWatermark in the batch and the floors rise only
when that batch commits; the records cap follows the head and needs no frame. A follower's
copy of a replicated topic plans none: it takes its leader's floors with the records it
fetches (shard/replication/replica_records.py).
"""

from __future__ import annotations

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.ledger import retention_rules
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_batch import payload_total
from topics_actors.shard.batch_stager import BatchStager, Staged, write_op
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType


def plan(stager: BatchStager, reader: RecordReader, topic: TopicState) -> None:
    """Plan the topic's floors now; log a TTL or byte-cap advance as an fsynced
    EvictWatermark; the commit raises them (retention_rules.apply)."""
    config = topic.config
    if not (config.ttl_ms or config.cap_records or config.cap_bytes) or topic.follower:
        return
    batch = stager.batch
    if topic.name in batch.retention:
        return
    floors = retention_rules.plan(topic, reader.read, stager.clock())
    if floors == (topic.evict_floor, topic.expiry_floor):
        return
    logged = (floors.expiry > topic.expiry_floor or floors.evict > max(
        topic.evict_floor, retention_rules.records_cap_floor(topic)))
    if logged and config.logged:
        stager.frame(FrameType.EVICT_WATERMARK, topic, frame_body.encode_evict(
            frame_body.EvictBody(floors.evict, floors.earliest, floors.expiry)))
    batch.retention[topic.name] = (topic, floors)


def plan_unless_busy(stager: BatchStager, reader: RecordReader,
                      topic: TopicState | None) -> None:
    """A read's retention: only when the batch has room (a read is never refused for it)."""
    if topic is not None and not stager.inbox_full():
        plan(stager, reader, topic)


def retain_request(stager: BatchStager, reader: RecordReader,
                   registry: TopicRegistry) -> Staged:
    """The reclaimer's pass: stage retention for every topic of the shard; the reply says
    how many had floors to raise."""
    stager.throttle()
    before = len(stager.batch.retention)
    for topic in registry:
        plan(stager, reader, topic)
    staged = len(stager.batch.retention) - before
    return write_op(lambda _info: {"topics": staged})


def admit(stager: BatchStager, reader: RecordReader, topic: TopicState, records: list) -> None:
    """discard "reject": refuse a batch the caps cannot hold, before any seq exists."""
    config = topic.config
    if config.discard != "reject" or not (config.cap_records or config.cap_bytes):
        return
    size = payload_total(records)
    if ((config.cap_records and len(records) > config.cap_records)
            or (config.cap_bytes and size > config.cap_bytes)):
        raise TopicsError("the batch alone exceeds the topic's cap",
                          ErrorCode.RECORD_TOO_LARGE,
                          {"topic": topic.name, "cap_records": config.cap_records,
                           "cap_bytes": config.cap_bytes})
    staged = stager.batch.retention.get(topic.name)
    earliest = staged[1].earliest if staged else topic.earliest_seq()
    gone, gone_bytes = retention_rules.dropped(topic, reader.read, earliest)
    pending = topic.next_seq - 1 - topic.head     # staged earlier in this batch
    count, live_bytes = topic.count - gone + pending, topic.bytes - gone_bytes
    if ((config.cap_records and count + len(records) > config.cap_records)
            or (config.cap_bytes and live_bytes + size > config.cap_bytes)):
        raise TopicsError(f"topic {topic.name!r} is full", ErrorCode.TOPIC_FULL,
                          {"topic": topic.name, "cap_records": config.cap_records,
                           "cap_bytes": config.cap_bytes, "head_seq": topic.head,
                           "earliest_seq": topic.earliest_seq()})
