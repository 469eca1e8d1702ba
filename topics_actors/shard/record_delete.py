"""A `delete_records` request in a shard's batch (the rules are ledger/delete_rules.py): the
Delete frame is logged with the topic's class and the delete applies once it commits."""

from __future__ import annotations

from topics_actors.errors import invalid, topic_not_found
from topics_actors.ledger import delete_rules
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import DeleteRecords
from topics_actors.shard import retention
from topics_actors.shard.batch_stager import BatchStager, Staged, write_op
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import failpoint, frame_body
from topics_actors.storage.frame_types import FrameType


def request(stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
            msg: DeleteRecords) -> Staged:
    """Validate the request, log its Delete frame; the delete applies once the batch is
    durable."""
    stager.throttle()
    if msg.before_seq is None and msg.match is None:
        raise invalid("a delete needs before_seq and/or match")
    if msg.before_seq is not None and msg.before_seq < 0:
        raise invalid("before_seq must not be negative")
    match = delete_rules.parse_match(msg.match)
    topic = registry.get(msg.topic)
    if topic is None:
        raise topic_not_found(msg.topic)
    retention.plan(stager, reader, topic)
    bound = topic.head + 1          # point in time: later appends are never touched
    stager.batch.touched.add(topic.name)
    if topic.config.logged:
        stager.frame(FrameType.DELETE, topic, frame_body.encode_delete(
            frame_body.DeleteBody(msg.before_seq, match, (), bound)),
            sync=topic.config.durability.acks_after_fsync)

    def publish(_info) -> dict:
        failpoint.hit("delete::after_commit_before_apply")
        gone = delete_rules.apply(topic, reader.read, msg.before_seq, match, bound,
                                  TopicState.delete_one, indexed=True)
        return {"topic": topic.name, "deleted": gone, "earliest_seq": topic.earliest_seq(),
                "head_seq": topic.head, "count": topic.count, "bytes": topic.bytes}
    return write_op(publish)
