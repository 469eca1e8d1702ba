"""The shard core's invariants are checked where they can break, and a broken one is a
crash (InvariantViolation), never an answer: seq contiguity at staging and at publish, the
position a batch lands at, and the undo log of a batch."""

from __future__ import annotations

import pytest

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import Append
from topics_actors.shard.batch_stager import Batch, BatchStager, roll_back
from topics_actors.shard.shard_stats import ShardStats
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.topic_config import TopicConfig

RECORD = (b'{"d":1}', b"", b"", 0, 1)


def _stager() -> BatchStager:
    return BatchStager(lambda: 1_000, ShardStats())


def test_publish_only_moves_the_head_to_the_next_seq():
    topic = TopicState("t", TopicConfig())
    topic.publish(1, [0], 1, 0)
    with pytest.raises(InvariantViolation):
        topic.publish(1, [0], 1, 0)          # a seq issued twice
    with pytest.raises(InvariantViolation):
        topic.publish(3, [0], 1, 0)          # a seq skipped
    assert topic.head == 1


def test_records_are_staged_only_above_the_head_and_after_an_undo_entry():
    stager, topic = _stager(), TopicState("t", TopicConfig())
    with pytest.raises(InvariantViolation, match="undo"):
        stager.appends(topic, 1, 0, [RECORD], sync=False)
    stager.save_undo("t", topic)
    topic.head = 4
    with pytest.raises(InvariantViolation, match="at or below the head"):
        stager.appends(topic, 4, 0, [RECORD], sync=False)
    assert stager.appends(topic, 5, 0, [RECORD], sync=False) == [0]


def test_an_idempotency_key_without_an_undo_entry_cannot_be_rolled_back():
    batch, topic = Batch(), TopicState("t", TopicConfig())
    batch.dedupe_added.append((topic, "key"))
    with pytest.raises(InvariantViolation):
        roll_back(batch, TopicRegistry(0, 1))


def test_a_batch_must_land_at_the_tail(shard, monkeypatch):
    shard.put("t")
    writer = shard.core.wal.writer
    real = writer.write
    monkeypatch.setattr(writer, "write", lambda buf: (lambda r: (r[0], r[1] + 8))(real(buf)))
    shard.core.submit(b"p", 1, Append("t", [[b"1"]]), 0)
    with pytest.raises(InvariantViolation, match="landed at"):
        shard.core.commit()


def test_a_violation_in_a_commit_is_not_answered_but_raised(shard):
    shard.put("t")
    shard.core.submit(b"p", 1, Append("t", [[b"1"]]), 0)
    shard.core.registry.topics["t"].head = 1      # as if seq 1 had been published already
    with pytest.raises(InvariantViolation, match="publishing seq 1 after head 1"):
        shard.core.commit()


# --- the invariants of issue 31 (docs/ARCHITECTURE.md section 5), each made to break ---------

def test_ops_never_commit_past_the_op_log():
    from topics_actors.ledger.op_log import Op, OpLog
    ops = OpLog()
    ops.append(Op(1, 1, ["delete", None, None, 1]))
    with pytest.raises(InvariantViolation, match="past the op log end"):
        ops.take_committed(5)
    assert ops.take_committed(1)[0].no == 1


def test_retention_floors_never_pass_the_head():
    from topics_actors.ledger import retention_rules
    topic = TopicState("t", TopicConfig())
    topic.publish(1, [0, 0], 2, 0)
    with pytest.raises(InvariantViolation, match="past its head"):
        retention_rules.apply(topic, lambda t, s: None, retention_rules.Floors(3, 0))


def test_a_topic_id_names_one_topic():
    registry = TopicRegistry(0, 1)
    registry.register(TopicState("a", TopicConfig(), 7))
    with pytest.raises(InvariantViolation, match="already names"):
        registry.register(TopicState("b", TopicConfig(), 7))


def test_a_deduped_write_covers_its_own_seqs():
    from topics_actors.ledger.dedupe_index import DedupeEntry
    topic = TopicState("t", TopicConfig())
    with pytest.raises(InvariantViolation, match="deduped write"):
        topic.dedupe.add("k", DedupeEntry(5, 4, 0, 0), 1_000)


def test_records_are_framed_only_at_the_next_seq(shard):
    shard.put("t")
    shard.core.submit(b"p", 1, Append("t", [[b"1"]]), 0)
    shard.core.commit()
    topic = shard.core.registry.get("t")
    topic.next_seq = topic.head                           # a seq issued twice: a bug
    with pytest.raises(InvariantViolation, match="not at its next seq"):
        shard.core.submit(b"p", 2, Append("t", [[b"2"]]), 0)


def test_a_read_never_shows_a_seq_above_the_high_watermark(shard):
    """The page is cut at the high watermark; a reader handing back a record of a later
    seq than asked (an index bug) would show it: the read ends the process instead."""
    from topics_actors.protocol.messages import Diff
    from topics_actors.shard import diff_read
    shard.put("t")
    shard.core.submit(b"p", 1, Append("t", [[b"1"], [b"2"]]), 0)
    shard.core.commit()
    topic, read = shard.core.registry.get("t"), shard.core.reader.read
    topic.hw = 1                                          # readers may see seq 1 only
    assert [r[0] for r in diff_read.diff(topic, read, Diff("t"), 0)["records"]] == [1]
    with pytest.raises(InvariantViolation, match="above what readers may see"):
        diff_read.diff(topic, lambda t, seq: read(t, seq + 1), Diff("t"), 0)


def test_a_seq_is_never_staged_twice_in_one_batch():
    stager, topic = _stager(), TopicState("t", TopicConfig())
    stager.save_undo("t", topic)
    stager.appends(topic, 1, 0, [RECORD], sync=False)
    topic.next_seq = 2
    with pytest.raises(InvariantViolation, match="staged again in one batch"):
        stager.appends(topic, 1, 0, [RECORD], sync=False)
