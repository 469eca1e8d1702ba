"""Server-sent-event framing of a watch stream (spec/api.md 7.2) and its composite cursor
(spec/api.md 1): pure functions from values to the bytes on the wire.

A frame is `event: <name>`, `id: <cursor>` (data frames only), one `data:` line of JSON, and
a blank line. The cursor id is the base64url (no padding) of the JSON map {topic: seq} with
sorted keys; a `Last-Event-ID` that does not decode to such a map is ignored (None).
"""

from __future__ import annotations

import base64
import binascii

import orjson

RETRY_MS = 2000
RETRY = b"retry: %d\n\n" % RETRY_MS
CONTENT_TYPE = "text/event-stream"
HEADERS = (("cache-control", "no-store"), ("x-accel-buffering", "no"))


def encode_cursor(cursors: dict[str, int]) -> bytes:
    raw = orjson.dumps(cursors, option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def decode_cursor(text: str | None) -> dict[str, int] | None:
    """The {topic: seq} map of a composite id, or None when it is not one."""
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
        value = orjson.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not isinstance(value, dict) or not all(
            isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0
            for seq in value.values()):
        return None
    return value


def frame(event: bytes, cursor_id: bytes | None, data: bytes) -> bytes:
    """One event; `data` is a single line of JSON."""
    head = b"event: " + event + b"\n"
    if cursor_id is not None:
        head += b"id: " + cursor_id + b"\n"
    return head + b"data: " + data + b"\n\n"


def heartbeat(now_ms: int) -> bytes:
    return b": hb %d\n\n" % now_ms


def record_data(topic: str, from_seq: int, to_seq: int, head_seq: int,
                records_json: bytes) -> bytes:
    """The `record` data line; `records_json` is the already rendered array, shared by
    every watcher that reads the same page."""
    return (b'{"topic":' + orjson.dumps(topic)
            + b',"from_seq":%d,"to_seq":%d,"head_seq":%d,"records":' % (from_seq, to_seq,
                                                                        head_seq)
            + records_json + b"}")


def tombstone_data(topic: str, tombstone: dict, first_read: bool) -> bytes:
    """A gap found by a read; on a topic's first read in a connection the reason is
    `from_seq_too_old` whatever caused it."""
    return orjson.dumps({
        "topic": topic, "reason": "from_seq_too_old" if first_read else tombstone["reason"],
        "gap_from": tombstone["gap_from"], "gap_to": tombstone["gap_to"],
        "earliest_seq": tombstone["earliest_seq"], "head_seq": tombstone["head_seq"]})


def caught_up_data(topic: str, head_seq: int) -> bytes:
    return orjson.dumps({"topic": topic, "head_seq": head_seq})


def deleted_data(topic: str) -> bytes:
    return orjson.dumps({"topic": topic, "head_seq": 0, "reason": "deleted"})


def shutting_down_data() -> bytes:
    return orjson.dumps({"code": "server_shutting_down",
                         "message": "the server is shutting down; reconnect"})
