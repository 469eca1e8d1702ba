"""Topic requests in a shard's batch: create or replace a config (`put_topic`), delete a
topic, read one topic's state or a page of the shard's topics.

Creating and reconfiguring log a TopicCreate frame (fsync class: a topic's existence and
config are always durable); a logged topic that was ephemeral also logs where its head is,
since its past records are not in the WAL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from topics_actors.errors import ErrorCode, TopicsError, invalid, topic_not_found
from topics_actors.ledger.queue_state import counters
from topics_actors.ledger.topic_state import TopicState
from topics_actors.limits import LIST_LIMIT_MAX
from topics_actors.protocol.messages import DeleteTopic, GetTopic, ListTopics, PutTopic
from topics_actors.shard import ram_buffer, retention
from topics_actors.shard.batch_stager import (
    BatchStager, CommitInfo, Staged, read_op, write_op,
)
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import TopicConfig, parse_config
from topics_actors.topic_identity import topic_id, valid_topic_name

log = logging.getLogger(__name__)

UNCOMMITTED = 1 << 62     # created_at of a topic whose creation is not durable yet


def create_topic(stager: BatchStager, registry: TopicRegistry, name: str,
                 config: TopicConfig) -> TopicState:
    """Register a new topic now (later requests of the batch see it) and log it."""
    if not valid_topic_name(name):
        raise invalid(f"invalid topic name {name!r}")
    tid = topic_id(name)
    clash = registry.by_tid.get(tid)
    if clash is not None and clash.name != name:
        raise TopicsError(f"topic id collision between {name!r} and {clash.name!r}")
    stager.save_undo(name, registry.get(name))
    topic = TopicState(name, config, tid)
    topic.created_at = (UNCOMMITTED, 0, 0)    # newer than any checkpoint until committed
    stager.batch.created.append(topic)
    registry.register(topic)
    stager.frame(FrameType.TOPIC_CREATE, topic, frame_body.encode_topic(name, config.to_bytes()))
    return topic


def configure_topic(stager: BatchStager, topic: TopicState, config: TopicConfig) -> None:
    """Give `topic` a new config now and log it (a put_topic, or a cluster's config of a
    placed topic arriving in its replication state)."""
    stager.save_undo(topic.name, topic)
    was_logged = topic.config.logged
    topic.config = config
    stager.frame(FrameType.TOPIC_CREATE, topic,
                 frame_body.encode_topic(topic.name, config.to_bytes()))
    staged_head = topic.next_seq - 1
    if config.logged and not was_logged and staged_head:
        # Records of the ephemeral past are not in the WAL; tell replay where the head is,
        # keeping any reservation still outstanding from an earlier disk period.
        topic.reserved_head = max(topic.reserved_head, staged_head)
        stager.frame(FrameType.HEAD_WATERMARK, topic,
                     frame_body.encode_u64(topic.reserved_head), seq=staged_head)


def take_cluster_config(stager: BatchStager, topic: TopicState, raw: dict) -> None:
    """A cluster's config of a placed topic (its replication state; a leader's put_topic
    changes it there, replica_rules.py): logged when it differs from the copy's own. A state
    without a config, or one this node cannot read, leaves the copy's as it is."""
    if not raw:
        return
    try:
        config = parse_config(raw, topic.name)
    except TopicsError as error:
        log.error("event=cluster_config_unreadable topic=%s error=%s", topic.name,
                  error.message)
        return
    if config != topic.config:
        configure_topic(stager, topic, config)
        log.info("event=cluster_config_taken topic=%s", topic.name)


def stale_cluster_copy(topic: TopicState, first_epoch: int, raw: dict) -> bool:
    """Whether a local copy belongs to an earlier topic of the name, deleted and created
    again while this node was away: its history starts before the state's first epoch, or
    it is of another type."""
    entries = topic.epochs.entries() if topic.epochs is not None else []
    if entries and entries[0][0] < first_epoch:
        return True
    try:
        return bool(raw) and parse_config(raw, topic.name).type != topic.config.type
    except TopicsError:
        return False


def put(stager: BatchStager, registry: TopicRegistry, msg: PutTopic) -> Staged:
    stager.throttle()
    if not valid_topic_name(msg.topic):
        raise invalid(f"invalid topic name {msg.topic!r}")
    config = parse_config(msg.config, msg.topic)
    topic = registry.get(msg.topic)
    created = topic is None
    if created:
        create_topic(stager, registry, msg.topic, config)
    elif topic.config.type != config.type:
        raise TopicsError("a topic's type cannot change", ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                          {"topic": msg.topic, "existing_type": topic.config.type,
                           "requested_type": config.type})
    elif topic.config != config:
        configure_topic(stager, topic, config)
    return write_op(lambda info: {"topic": msg.topic, "created": created,
                                  "config": config.to_json()})


def delete(stager: BatchStager, registry: TopicRegistry, msg: DeleteTopic,
           drop_buffer) -> Staged:
    """`drop_buffer(file_no)` releases an ephemeral topic's RAM records once it is gone."""
    stager.throttle()
    topic = registry.get(msg.topic)
    if topic is None:
        return write_op(lambda info: {"topic": msg.topic, "deleted": False,
                                      "routers_removed": []})
    check_if_empty(msg, topic)
    routers = drop_topic(stager, registry, topic)

    def publish(info: CommitInfo) -> dict:
        ram_buffer.drop_all(topic, drop_buffer)
        info.woken.add(msg.topic)   # parked readers learn that the topic is gone
        return {"topic": msg.topic, "deleted": True, "routers_removed": routers}
    return write_op(publish)


def check_if_empty(msg: DeleteTopic, topic: TopicState) -> None:
    """A delete `if_empty` of a topic holding records (or reserving seqs) is refused."""
    if msg.if_empty and (topic.count or topic.next_seq - 1 > topic.head):
        raise TopicsError(f"topic {msg.topic!r} is not empty", ErrorCode.TOPIC_NOT_EMPTY,
                          {"topic": msg.topic, "count": topic.count})


def drop_topic(stager: BatchStager, registry: TopicRegistry, topic: TopicState) -> list[str]:
    """Unregister `topic` now (later requests of the batch do not see it) and log its
    deletion; the routers feeding it, which go with it."""
    stager.save_undo(topic.name, topic)
    stager.frame(FrameType.TOPIC_DELETE, topic, frame_body.encode_topic(topic.name, b""))
    registry.unregister(topic)
    return sorted(topic.routers or ())


def get(stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
        msg: GetTopic, fold_reads: Callable[[TopicState], None]) -> Staged:
    """`fold_reads`: takes in the reads the gateways answered themselves (head_board.py)."""
    retention.plan_unless_busy(stager, reader, registry.get(msg.topic))

    def answer(_info: CommitInfo) -> dict:
        topic = registry.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        now = stager.clock()
        fold_reads(topic)
        if msg.touch:
            topic.last_read_ts = now
        state = topic.state(now)
        if topic.config.type == "queue":
            state["queue"] = counters(topic, now)
        return state
    return read_op(answer)


def list_page(stager: BatchStager, registry: TopicRegistry, msg: ListTopics,
              fold_reads: Callable[[TopicState], None]) -> Staged:
    def answer(_info: CommitInfo) -> dict:
        now = stager.clock()
        topics, more = registry.page(msg.prefix, msg.after, max(1, min(msg.limit,
                                                                       LIST_LIMIT_MAX)))
        for topic in topics:
            fold_reads(topic)
        if msg.touch:
            for topic in topics:
                topic.last_read_ts = now
        return {"topics": [_summary(t, now) for t in topics], "more": more}
    return read_op(answer)


def _summary(topic: TopicState, now: int) -> dict:
    """A list item; a queue's carries its `queue` counters too (for the metrics)."""
    summary = topic.summary(now)
    if topic.config.type == "queue":
        summary["queue"] = counters(topic, now)
    return summary
