"""The frames of replication and routers as the topic ledger applies them (topic_ledger.py's
table names these next to its own): a replicated topic's leader epochs, its op log (ops,
their commit and drop), a cut of its log; a router's create, delete and cursor. Each
takes (ledger, frame, view) like TopicLedger's own frame methods.
"""

from __future__ import annotations

import collections
from typing import Protocol

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.ledger import router_state
from topics_actors.ledger.op_log import Op, OpLog
from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage import frame_body
from topics_actors.storage.frame import Frame


class FrameLedger(Protocol):
    """What these rules ask of the ledger (TopicLedger)."""
    ignored: collections.Counter

    def topic_of(self, frame: Frame, what: str) -> TopicState | None: ...

    def truncate_records(self, topic: TopicState, last: int) -> None: ...


def epoch(ledger: FrameLedger, frame: Frame, view) -> None:
    topic = ledger.topic_of(frame, "epoch")
    if topic is not None:
        if topic.epochs is None:
            topic.epochs = EpochCache()
        topic.epochs.assign(frame_body.decode_body(frame.type, frame.data), frame.seq)


def _ops_of(ledger: FrameLedger, frame: Frame) -> OpLog | None:
    topic = ledger.topic_of(frame, "op")
    if topic is not None and topic.ops is None:
        topic.ops = OpLog()
    return None if topic is None else topic.ops


def repl_op(ledger: FrameLedger, frame: Frame, view) -> None:
    ops = _ops_of(ledger, frame)
    if ops is not None and frame.seq == ops.leo:
        epoch, body = frame_body.decode_body(frame.type, frame.data)
        ops.append(Op(frame.seq, epoch, body))


def ops_commit(ledger: FrameLedger, frame: Frame, view) -> None:
    ops = _ops_of(ledger, frame)
    if ops is not None:
        ops.take_committed(frame.seq)


def ops_drop(ledger: FrameLedger, frame: Frame, view) -> None:
    ops = _ops_of(ledger, frame)
    if ops is not None:
        ops.drop_pending()


def truncate(ledger: FrameLedger, frame: Frame, view) -> None:
    topic = ledger.topic_of(frame, "truncate")
    if topic is None:
        return
    last = frame_body.decode_body(frame.type, frame.data)
    if last < topic.absorbed:     # never logged so (replica_book.py checks first)
        ledger.ignored["truncate_below_absorbed"] += 1
        return
    ledger.truncate_records(topic, last)


def router_create(ledger: FrameLedger, frame: Frame, view) -> None:
    topic = ledger.topic_of(frame, "router")
    if topic is not None:
        if topic.routers is None:
            topic.routers = {}
        router_state.apply_create(topic.routers, frame_body.decode_body(frame.type,
                                                                        frame.data))


def router_delete(ledger: FrameLedger, frame: Frame, view) -> None:
    topic = ledger.topic_of(frame, "router")
    if topic is not None and topic.routers:
        topic.routers.pop(frame_body.decode_body(frame.type, frame.data).name, None)


def router_cursor(ledger: FrameLedger, frame: Frame, view) -> None:
    topic = ledger.topic_of(frame, "router")
    if topic is None:
        return
    body = frame_body.decode_body(frame.type, frame.data)
    if not router_state.apply_cursor(topic.routers or {}, body):
        ledger.ignored["router_cursor_without_router"] += 1
    if body.trim_last:
        topic.add_trim(body.trim_first, body.trim_last)
