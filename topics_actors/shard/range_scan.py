"""The bulk range read (`scan`): a seq range of one topic in columns, data as raw JSON text.

Same visibility rules as the diff read (diff_read.py): the same tombstone decision at the
cursor, holes and TTL-expired records passed over silently. What differs is the shape of the
reply, built for analytics readers (the Spark source): seqs and timestamps as packed int64
arrays, every record's `data` JSON text concatenated with an int32 offsets array, so a
reader turns a reply into Arrow columns without one Python object per record. `data` is
cut out of the stored envelope without parsing it (storage.frame.envelope_data).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable

from topics_actors.errors import invalid, topic_not_found
from topics_actors.limits import (
    DIFF_BATCH_BYTES_MAX, SCAN_LIMIT_DEFAULT, SCAN_LIMIT_MAX, clamp,
)
from topics_actors.protocol.messages import Scan
from topics_actors.shard.diff_read import _tombstone as tombstone_at
from topics_actors.shard.file_table import StoredRecord
from topics_actors.shard.topic_state import TopicState
from topics_actors.storage.frame import envelope_data


def validate_scan(req: Scan) -> None:
    for name in ("after_seq", "until_seq", "limit", "max_batch_bytes"):
        if getattr(req, name) < 0:
            raise invalid(f"scan field {name!r} must not be negative")


def scan(topic: TopicState, read: Callable[[TopicState, int], StoredRecord | None], req: Scan,
         now_ms: int) -> dict:
    earliest = topic.earliest_seq()
    head = topic.head
    tombstone, cursor = tombstone_at(topic, req.after_seq, earliest)
    until = min(req.until_seq or head, head)
    limit = clamp(req.limit or SCAN_LIMIT_DEFAULT, 1, SCAN_LIMIT_MAX)
    budget = clamp(req.max_batch_bytes or DIFF_BATCH_BYTES_MAX, 1, DIFF_BATCH_BYTES_MAX)
    ttl_ms = topic.config.ttl_ms
    seqs, stamps, offsets = array("q"), array("q"), array("i", (0,))
    data, tags, nodes = bytearray(), [], []
    seq = max(cursor, min(earliest - 1, until))   # below earliest everything is gone
    while seq < until and len(tags) < limit:
        rec = read(topic, seq + 1)
        if rec is None or (ttl_ms and now_ms - rec.ts > ttl_ms):
            seq += 1
            continue
        payload = envelope_data(rec.envelope, rec.flags)
        if tags and len(data) + len(payload) > budget:
            break
        seqs.append(rec.seq)
        stamps.append(rec.ts)
        data += payload
        offsets.append(len(data))
        tags.append(rec.tag)
        nodes.append(rec.node)
        seq += 1
    topic.last_read_ts = now_ms
    if sys.byteorder == "big":     # the wire arrays are little-endian
        for column in (seqs, stamps, offsets):
            column.byteswap()
    return {"topic": topic.name, "count": len(tags), "seqs": seqs.tobytes(),
            "ts": stamps.tobytes(), "data": bytes(data), "offsets": offsets.tobytes(),
            "tags": tags, "nodes": nodes, "next_from_seq": seq, "head_seq": head,
            "earliest_seq": earliest, "caught_up": seq == head, "tombstone": tombstone}


def scan_request(core, peer: bytes, corr: int, msg: Scan, t0_ns: int) -> None:
    """The shard core's handler of `scan` (a read op: it runs after the turn's commit)."""
    validate_scan(msg)
    core._retain_named(msg.topic)

    def read(_info) -> dict:
        topic = core.topics.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        return scan(topic, core.read_record, msg, core.clock())
    core._read_op(peer, corr, t0_ns, read)
