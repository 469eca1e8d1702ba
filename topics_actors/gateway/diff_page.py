"""A diff reply from the shard rendered as the /v0 JSON body (spec/api.md 5.6).

Record payloads are spliced, not parsed: a stored envelope is `{"d":<data>}` or
`{"d":<data>,"m":<meta>}`, and when its bytes hold no `,"m":` at all it has no meta, so
`<data>` is the slice between the two. Only an envelope that may carry meta (or whose data
merely contains those bytes) is parsed to find the boundary.
"""

from __future__ import annotations

import orjson

_PLAIN_HEAD = b'{"d":'
_META_MARK = b',"m":'


def _payload(envelope: bytes, include_meta: bool) -> bytes:
    if _META_MARK not in envelope and envelope.startswith(_PLAIN_HEAD):
        return b',"data":' + envelope[5:-1] + b"}"
    body = orjson.loads(envelope)
    out = b',"data":' + orjson.dumps(body["d"])
    if include_meta and "m" in body:
        out += b',"meta":' + orjson.dumps(body["m"])
    return out + b"}"


def record_payload(envelope: bytes, include_meta: bool) -> bytes:
    """The `,"data":…[,"meta":…]}` tail of an API record from its stored envelope."""
    return _payload(envelope, include_meta)


def render_records(records: list, include_meta: bool) -> bytes:
    """[[seq, ts, envelope, tag|None, node|None], ...] -> the JSON array of API records."""
    dumps = orjson.dumps
    parts = []
    for seq, ts, envelope, tag, node in records:
        head = b'{"$seq":%d,"$ts":%d' % (seq, ts)
        if node is not None:
            head += b',"$node":' + dumps(node)
        if tag is not None:
            head += b',"$tag":' + dumps(tag)
        parts.append(head + _payload(envelope, include_meta))
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
