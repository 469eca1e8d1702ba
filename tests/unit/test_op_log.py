"""The op log of a replicated topic's deletes, acks and lease events (ledger/op_log.py) and its
WAL frames; which replicated queues a config allows."""

import pytest

from topics_actors.errors import InvariantViolation, TopicsError
from topics_actors.ledger.op_log import Op, OpLog, bound_of
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import parse_config

pytestmark = pytest.mark.timeout(10)

DELETE = ["delete", 5, None, 9]


def test_ops_append_in_order_and_commit_moves_them_to_recent():
    log = OpLog()
    assert log.leo == 1
    for no in (1, 2, 3):
        log.append(Op(no, 7, DELETE))
    with pytest.raises(InvariantViolation):
        log.append(Op(5, 7, DELETE))
    assert [op.no for op in log.take_committed(2)] == [1, 2]
    assert (log.applied, log.leo, log.pending_epoch) == (2, 4, 7)
    assert [op.no for op in log.since(1, 10)] == [1, 2, 3]
    assert log.since(4, 10) == []
    assert log.epoch_of(2) == 7 and log.epoch_of(9) is None


def test_a_fresh_copy_starts_after_the_leaders_applied_ops():
    log = OpLog()
    assert log.take_committed(40) == []
    assert (log.applied, log.leo) == (40, 41)
    assert log.since(3, 10) is None          # not held here: the follower must reset


def test_dropping_pending_ops_keeps_what_was_applied():
    log = OpLog(applied=3, pending=[Op(4, 1, DELETE), Op(5, 1, DELETE)])
    assert log.drop_pending() == 2
    assert (log.applied, log.leo, log.pending_epoch) == (3, 4, None)
    log.append(Op(4, 2, DELETE))             # the new leader's op 4
    assert log.pending_epoch == 2


def test_snapshot_entry_round_trip():
    log = OpLog(applied=9, pending=[Op(10, 3, ["delete", None, [0, "pii"], 50])])
    again = OpLog.from_entry(log.to_entry())
    assert (again.applied, again.pending) == (9, log.pending)


@pytest.mark.parametrize("body", [
    ["delete", 5, None, 9], ["delete", None, [1, "a"], 3]])
def test_repl_op_frame_bodies_round_trip(body):
    raw = frame_body.encode_op(12, body)
    assert frame_body.decode_body(FrameType.REPL_OP, raw) == (12, body)


@pytest.mark.parametrize("bad", [["drop", 1, None, 2], ["delete", "x", None, 2],
                                 ["delete", 1, None], "delete"])
def test_unknown_ops_end_the_log(bad):
    with pytest.raises(ValueError):
        frame_body.decode_body(FrameType.REPL_OP, frame_body.encode_op(1, bad))


def test_an_op_waits_for_the_records_it_names():
    assert bound_of(DELETE) == 9
    assert bound_of(["seqs", [4, 12, 7]]) == 13
    assert bound_of(["leases", [[3, 0, 1, 99, 1, "w"], [8, 0, 2, 99, 1, "w"]]]) == 9


QUEUE = {"type": "queue", "replication_factor": 3, "durability": "fsync"}


def test_a_replicated_queue_keeps_durable_leases_but_no_dead_letter_or_claim_windows():
    config = parse_config({**QUEUE, "leases_durable": True}, "q")
    assert config.leases_durable and config.replicated and config.min_isr == 2
    assert parse_config({**QUEUE, "claim_jitter_ms": 5}, "q").claim_jitter_ms == 5
    refused = [({**QUEUE, "dead_letter": "dlq", "max_deliveries": 3}, "dead_letter"),
               ({**QUEUE, "leases_durable": True, "claim_jitter_ms": 5}, "claim_jitter_ms"),
               ({"replication_factor": 2, "durability": "ephemeral"}, "ephemeral")]
    for body, named in refused:
        with pytest.raises(TopicsError) as error:
            parse_config(body, "q")
        assert error.value.code.wire == "invalid_request" and named in str(error.value)
