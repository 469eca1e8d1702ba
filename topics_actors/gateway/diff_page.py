"""A diff reply from the shard rendered as the /v0 JSON body (spec/api.md 5.6).

Record payloads are spliced, not parsed: each wire record says whether its stored envelope
has meta, and record_envelope.split cuts data and meta out of it.
"""

from __future__ import annotations

import orjson

from topics_actors.record_envelope import split


def record_payload(envelope: bytes, has_meta: bool, include_meta: bool) -> bytes:
    """The `,"data":…[,"meta":…]}` tail of an API record from its stored envelope."""
    data, meta = split(envelope, has_meta)
    if include_meta and meta is not None:
        return b',"data":' + data + b',"meta":' + meta + b"}"
    return b',"data":' + data + b"}"


def render_records(records: list, include_meta: bool, include_data: bool = True,
                   include_tags: bool = True) -> bytes:
    """[[seq, ts, envelope, tag|None, node|None, has_meta], ...] -> the JSON array of API
    records (without `data` when not include_data: the watch option; without `$tag` when
    not include_tags: a shard's diff leaves tags out unless asked, a feed page has them)."""
    dumps = orjson.dumps
    parts = []
    for seq, ts, envelope, tag, node, has_meta in records:
        head = b'{"$seq":%d,"$ts":%d' % (seq, ts)
        if node is not None:
            head += b',"$node":' + dumps(node)
        if tag is not None and include_tags:
            head += b',"$tag":' + dumps(tag)
        if include_data or include_meta:
            data, meta = split(envelope, has_meta)
            if include_data:
                head += b',"data":' + data
            if include_meta and meta is not None:
                head += b',"meta":' + meta
        parts.append(head + b"}")
    return b"[" + b",".join(parts) + b"]"


def render_diff(reply: dict, include_meta: bool, total_ms: float) -> bytes:
    performance = dict(reply.get("performance") or {})
    performance["server_total_ms"] = total_ms
    performance["records_scanned"] = reply.get("records_scanned", 0)
    return orjson.dumps({
        "topic": reply["topic"],
        "records": orjson.Fragment(render_records(reply["records"], include_meta)),
        "next_from_seq": reply["next_from_seq"], "head_seq": reply["head_seq"],
        "earliest_seq": reply["earliest_seq"], "caught_up": reply["caught_up"],
        "tombstone": reply["tombstone"], "lag": reply["lag"], "performance": performance})
