"""Server-sent-event framing of a watch stream (spec/api.md 7.2) and its composite cursor
(topics_actors/watch_cursor.py): pure functions from values to the bytes on the wire.

A frame is `event: <name>`, `id: <cursor>` (data frames only), one `data:` line of JSON, and
a blank line.
"""

from __future__ import annotations

import orjson

from topics_actors.watch_cursor import WatchEvent

RETRY_MS = 2000
RETRY = b"retry: %d\n\n" % RETRY_MS
CONTENT_TYPE = "text/event-stream"
HEADERS = (("cache-control", "no-store"), ("x-accel-buffering", "no"))


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


def render(event: WatchEvent) -> bytes:
    """A watch event as a frame; a record's data is the shared, already rendered line."""
    data = event.data if isinstance(event.data, bytes) else orjson.dumps(event.data)
    return frame(event.event.encode(), event.cursor_id, data)


def shutting_down_data() -> bytes:
    return orjson.dumps({"code": "server_shutting_down",
                         "message": "the server is shutting down; reconnect"})
