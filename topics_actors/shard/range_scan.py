"""The bulk range read (`scan`): a seq range of one topic in columns, data as raw JSON text.

Same visibility rules as the diff read (diff_read.py): the same tombstone decision at the
cursor, holes and TTL-expired records passed over silently. What differs is the shape of the
reply, built for analytics readers (the Spark source): seqs and timestamps as packed int64
arrays, every record's `data` JSON text concatenated with an int32 offsets array, so a
reader turns a reply into Arrow columns without one Python object per record. `data` is
cut out of the stored envelope without parsing it (record_envelope.data).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from topics_actors.errors import InvariantViolation, invalid, topic_not_found
from topics_actors.limits import (
    DIFF_BATCH_BYTES_MAX, SCAN_LIMIT_DEFAULT, SCAN_LIMIT_MAX, clamp,
)
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import Scan
from topics_actors.record_envelope import data as envelope_data, has_meta
from topics_actors.shard import retention
from topics_actors.shard.batch_stager import BatchStager, Staged, read_op
from topics_actors.shard.diff_read import tombstone_at
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage.file_table import StoredRecord
from topics_actors.storage.segment import SegmentReader, segment_stem
from topics_actors.storage.segment_run import Columns, decode_run


def validate_scan(req: Scan) -> None:
    for name in ("after_seq", "until_seq", "limit", "max_batch_bytes"):
        if getattr(req, name) < 0:
            raise invalid(f"scan field {name!r} must not be negative")


def scan(topic: TopicState, read: Callable[[TopicState, int], StoredRecord | None], req: Scan,
         now_ms: int, segments: SegmentReader | None = None) -> dict:
    """A page of the range. Runs of sealed seqs are decoded in bulk from their segment
    (when `segments` is given); the rest (the WAL tail, an ephemeral past) record by
    record through `read`."""
    earliest = topic.earliest_seq()
    head = topic.visible
    tombstone, cursor = tombstone_at(topic, req.after_seq, earliest)
    until = min(req.until_seq or head, head)
    limit = clamp(req.limit or SCAN_LIMIT_DEFAULT, 1, SCAN_LIMIT_MAX)
    budget = clamp(req.max_batch_bytes or DIFF_BATCH_BYTES_MAX, 1, DIFF_BATCH_BYTES_MAX)
    ttl_ms = topic.config.ttl_ms
    cols = Columns()
    tags = cols.tags
    seq = max(cursor, min(earliest - 1, until))   # below earliest everything is gone
    while seq < until and len(tags) < limit:
        run_end = _sealed_run_end(topic, seq + 1, until) if segments is not None else 0
        if run_end:
            # At most the records the limit leaves: only the budget can cut the run short.
            run_end = min(run_end, seq + limit - len(tags))
            seq = _scan_run(topic, segments, seq + 1, run_end, cols, now_ms, budget)
            if seq < run_end:
                break
            continue
        rec = read(topic, seq + 1)
        if rec is None or (ttl_ms and now_ms - rec.ts > ttl_ms):
            seq += 1
            continue
        payload = envelope_data(rec.envelope, has_meta(rec.flags))
        if tags and len(cols.data) + len(payload) > budget:
            break
        cols.seqs.append(rec.seq)
        cols.stamps.append(rec.ts)
        cols.data += payload
        cols.offsets.append(len(cols.data))
        tags.append(rec.tag)
        cols.nodes.append(rec.node)
        seq += 1
    topic.last_read_ts = now_ms
    return _reply(topic, cols, seq, head, earliest, tombstone)


def _sealed_run_end(topic: TopicState, seq: int, until: int) -> int:
    """The last seq of the run from `seq` that one sealed segment holds (0 when `seq` is not
    in a segment: past the absorbed point, or a hole)."""
    if seq > topic.absorbed:
        return 0
    i = topic.segment_of(seq)
    if i < 0:
        return 0
    return min(until, topic.absorbed, topic.seg_firsts[i] + topic.seg_counts[i] - 1)


def _scan_run(topic: TopicState, segments: SegmentReader, lo: int, hi: int, cols: Columns,
              now_ms: int, budget: int) -> int:
    """Decode the sealed seqs lo..hi (one segment) into `cols`; the last seq consumed."""
    first = topic.seg_firsts[topic.segment_of(lo)]
    offsets, lengths, flags, start, data = segments.run(topic.seg_dir, first, lo, hi)
    ttl_ms = topic.config.ttl_ms
    where = f"{topic.seg_dir}/{segment_stem(first)}"
    return decode_run(memoryview(data), start, offsets, lengths, lo, cols, where,
                      skip=topic.deleted or (), ts_min=now_ms - ttl_ms if ttl_ms else -1,
                      budget=budget, check_deleted=True, flags=flags)


def _reply(topic: TopicState, cols: Columns, seq: int, head: int, earliest: int,
           tombstone) -> dict:
    if seq > max(topic.visible, head):
        raise InvariantViolation(f"{topic.name!r}: a scan reached seq {seq}, above what "
                                 f"readers may see ({topic.visible})")
    if sys.byteorder == "big":     # the wire arrays are little-endian
        for column in (cols.seqs, cols.stamps, cols.offsets):
            column.byteswap()
    return {"topic": topic.name, "count": len(cols.tags), "seqs": cols.seqs.tobytes(),
            "ts": cols.stamps.tobytes(), "data": bytes(cols.data),
            "offsets": cols.offsets.tobytes(), "tags": cols.tags, "nodes": cols.nodes,
            "next_from_seq": seq, "head_seq": head, "earliest_seq": earliest,
            "caught_up": seq == head, "tombstone": tombstone}


def scan_request(stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
                 msg: Scan) -> Staged:
    """The shard's handler of `scan`: a read, answered after the turn's commit."""
    validate_scan(msg)
    retention.plan_unless_busy(stager, reader, registry.get(msg.topic))

    def answer(_info) -> dict:
        topic = registry.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        return scan(topic, reader.read, msg, stager.clock(), reader.segments)
    return read_op(answer)
