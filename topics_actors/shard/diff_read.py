"""The diff read of spec/api.md 5.6: tombstone decision, then a walk from the cursor."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from topics_actors.errors import InvariantViolation, invalid, topic_not_found
from topics_actors.ledger.topic_state import TopicState
from topics_actors.limits import (
    DIFF_BATCH_BYTES_DEFAULT, DIFF_BATCH_BYTES_MAX, DIFF_LIMIT_DEFAULT, DIFF_LIMIT_MAX,
    DIFF_SETTLE_ROUTERS_MAX, DIFF_SETTLE_WAIT_MS,
    NODE_BYTES_MAX, clamp,
)
from topics_actors.protocol.messages import Diff
from topics_actors.record_envelope import has_meta, payload_bytes
from topics_actors.shard import retention
from topics_actors.protocol.head_table import Slot
from topics_actors.shard.batch_stager import BatchStager, Staged, read_op
from topics_actors.shard.long_poll import Park
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry

if TYPE_CHECKING:
    from topics_actors.shard.routers.router_book import RouterBook
from topics_actors.storage.file_table import StoredRecord
from topics_actors.storage.frame_types import HOPS_MASK, HOPS_SHIFT


def validate_diff(req: Diff) -> None:
    for name in ("from_seq", "limit", "wait_ms", "max_batch_bytes"):
        if getattr(req, name) < 0:
            raise invalid(f"diff field {name!r} must not be negative")
    if req.settle is not None:
        if req.wait_ms or len(req.settle) > DIFF_SETTLE_ROUTERS_MAX or not all(
                isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                and type(pair[1]) is int and pair[1] >= 0 for pair in req.settle):
            raise invalid("diff field 'settle' must be at most "
                          f"{DIFF_SETTLE_ROUTERS_MAX} [router, cursor] pairs, without wait_ms")
    nodes = [req.node] if isinstance(req.node, str) else req.node
    if nodes is not None and (not isinstance(nodes, list) or not all(
            isinstance(n, str) and len(n.encode()) <= NODE_BYTES_MAX for n in nodes)):
        raise invalid("diff field 'node' must be a node name or a list of node names")


def _reason(topic: TopicState, gap_from: int) -> str:
    cap = topic.evict_floor >= gap_from
    ttl = topic.expiry_floor >= gap_from
    if cap and ttl:
        return "mixed"
    if ttl:
        return "ttl"
    if not cap and topic.source_trim_floor >= gap_from:
        return "source_trim"
    return "cap"


def tombstone_at(topic: TopicState, from_seq: int, earliest: int) -> tuple[dict | None, int]:
    """(tombstone or None, cursor to walk from)."""
    head = topic.visible
    if from_seq > topic.head:   # the log end: a cursor above the high watermark is no sign
        return ({"gap_from": 1, "gap_to": head, "reason": "recreated", "missed_estimate": head,
                 "earliest_seq": earliest, "head_seq": head}, earliest - 1)
    involuntary = topic.involuntary_earliest()
    if from_seq + 1 < involuntary:
        gap_from, gap_to = from_seq + 1, involuntary - 1
        return ({"gap_from": gap_from, "gap_to": gap_to, "reason": _reason(topic, gap_from),
                 "missed_estimate": gap_to - gap_from + 1, "earliest_seq": involuntary,
                 "head_seq": head}, max(earliest - 1, from_seq))
    trim = trim_at(topic, from_seq + 1)
    if trim is not None:
        gap_to = min(trim[1], head)
        return ({"gap_from": from_seq + 1, "gap_to": gap_to, "reason": "source_trim",
                 "missed_estimate": gap_to - from_seq, "earliest_seq": earliest,
                 "head_seq": head}, gap_to)
    return None, from_seq


def trim_at(topic: TopicState, seq: int) -> list[int] | None:
    """The run of seqs standing for source records a router could not copy that holds
    `seq` (TopicState.add_trim), if any."""
    for trim in topic.trims or ():
        if trim[0] <= seq <= trim[1]:
            return trim
    return None


def _walk_end(topic: TopicState, cursor: int, head: int) -> int:
    """Where a walk from `cursor` stops: the head, or just before the next trimmed run (the
    next read starts there and reports it)."""
    starts = [t[0] for t in topic.trims or () if t[0] > cursor + 1]
    return min(head, min(starts) - 1) if starts else head


def _reader_nodes(topic: TopicState, node: object) -> frozenset[str]:
    if not topic.config.dedupe_node or node is None:
        return frozenset()
    return frozenset((node,)) if isinstance(node, str) else frozenset(node)


def diff(topic: TopicState, read: Callable[[TopicState, int], StoredRecord | None], req: Diff,
         now_ms: int) -> dict:
    earliest = topic.earliest_seq()
    tombstone, cursor = tombstone_at(topic, req.from_seq, earliest)
    limit = clamp(req.limit or DIFF_LIMIT_DEFAULT, 1, DIFF_LIMIT_MAX)
    budget = clamp(req.max_batch_bytes or DIFF_BATCH_BYTES_DEFAULT, 1, DIFF_BATCH_BYTES_MAX)
    nodes = _reader_nodes(topic, req.node)
    ttl_ms = topic.config.ttl_ms
    # A replicated topic shows nothing above its high watermark; a cursor above it (read
    # from a leader whose watermark was ahead) waits there.
    head, records, used, scanned = max(topic.visible, min(cursor, topic.head)), [], 0, 0
    seq = max(cursor, min(earliest - 1, head))   # below earliest everything is gone: pass it
    end = _walk_end(topic, seq, head) if topic.trims else head
    while seq < end and len(records) < limit:
        rec = read(topic, seq + 1)
        scanned += 1
        if rec is None:
            seq += 1
            continue
        if (ttl_ms and now_ms - rec.ts > ttl_ms) or (nodes and rec.node in nodes):
            seq += 1
            continue
        size = payload_bytes(len(rec.envelope), rec.flags)
        if records and used + size > budget:
            break
        record = [rec.seq, rec.ts, rec.envelope, rec.tag if req.include_tags else None,
                  rec.node, has_meta(rec.flags)]
        if req.include_hops:
            record.append((rec.flags & HOPS_MASK) >> HOPS_SHIFT)
        records.append(record)
        used += size
        seq += 1
    if records and records[-1][0] > topic.visible:
        raise InvariantViolation(f"{topic.name!r}: a read reached seq {records[-1][0]}, above "
                                 f"what readers may see ({topic.visible})")
    topic.last_read_ts = now_ms
    return {"topic": topic.name, "records": records, "next_from_seq": seq, "head_seq": head,
            "earliest_seq": earliest, "caught_up": seq == head, "tombstone": tombstone,
            "lag": head - seq, "records_scanned": scanned}


def diff_request(stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
                 msg: Diff, routers: RouterBook,
                 claim: Callable[[TopicState], Slot | None] | None = None) -> Staged:
    """The shard's handler of `diff`: a read after the turn's commit; a caught-up empty
    page with `wait_ms` parks until the topic publishes (long_poll.py); a read that names
    routers to `settle` first parks until they have copied that far, and its reply gives
    their cursors at the read (`router_cursors`). `claim`: the head board's
    (head_board.py); the reply then says where the topic's head is published, as
    `head_slot`."""
    validate_diff(msg)
    retention.plan_unless_busy(stager, reader, registry.get(msg.topic))
    settled = routers.settled

    def now() -> dict:
        topic = registry.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        reply = diff(topic, reader.read, msg, stager.clock())
        if msg.settle is not None:
            reply["router_cursors"] = routers.cursors(msg.topic, [n for n, _ in msg.settle])
        if msg.head_slot and claim is not None and (place := claim(topic)) is not None:
            reply["head_slot"] = place
        return reply

    def after_settling() -> dict:
        if settled(msg.topic, msg.settle):
            return now()
        return {"topic": msg.topic, "settled": False}

    def answer(_info) -> dict | Park:
        if msg.settle and not settled(msg.topic, msg.settle):
            return Park(msg.topic, DIFF_SETTLE_WAIT_MS, after_settling)
        result = now()
        if (msg.wait_ms > 0 and not result["records"] and result["tombstone"] is None
                and result["caught_up"]):
            return Park(msg.topic, msg.wait_ms, now)
        return result
    return read_op(answer)
