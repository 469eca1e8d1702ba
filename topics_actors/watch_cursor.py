"""A watch's composite cursor and how reads move it (spec/api.md 1, 7.2), shared by the
gateway's SSE streams and the client library's `watch`.

The cursor id is the base64url (no padding) of the JSON map {topic: seq} with sorted keys.
WatchCursors turns the pages read for a topic into the named events of a watch, each with
the cursor id after it: `tombstone` (on a topic's first read in a connection its reason is
`from_seq_too_old`), `record` (only when a record passed), `caught-up` (once per
backlog -> live transition, a record frame counting as backlog), `topic-deleted` (terminal
for that topic; the watch is finished when every topic is).

A WebSocket (gateway/ws_session.py) keeps one WatchCursors whose topics come and go
(`add`, `remove`), without the `from_seq_too_old` relabel and without cursor ids.
"""

from __future__ import annotations

import base64
import binascii
import functools
from typing import NamedTuple

import orjson


def encode_cursor(cursors: dict[str, int]) -> bytes:
    return _encode_items(tuple(cursors.items()))


@functools.lru_cache(maxsize=1024)
def _encode_items(items: tuple) -> bytes:
    """Memoized: the streams of one gateway watching the same topics sit at the same
    cursors, and a commit moves them all to the same next one. Only the cursors of the
    last few commits are worth keeping: 4096 entries held 1.8 MiB of a gateway under the
    soak (tracemalloc), 1024 hold a quarter."""
    raw = orjson.dumps(dict(items), option=orjson.OPT_SORT_KEYS)
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def decode_cursor(text: str | None) -> dict[str, int] | None:
    """The {topic: seq} map of a composite id, or None when it is not one."""
    if not text:
        return None
    text = text.strip()
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(value, dict) or not all(
            isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0
            for seq in value.values()):
        return None
    return value


class PageRead(NamedTuple):
    """What one diff of a topic answered, as far as the cursor is concerned."""
    next_from_seq: int
    head_seq: int
    caught_up: bool
    tombstone: dict | None
    records: object          # the record payload (opaque here); None when none passed


class WatchEvent(NamedTuple):
    event: str               # record | tombstone | caught-up | topic-deleted
    cursor_id: bytes         # the composite cursor after this event
    data: object             # a dict, or the record payload as given


class WatchCursors:
    def __init__(self, cursors: dict[str, int], relabel: bool = True, ids: bool = True):
        self.cursors = dict(sorted(cursors.items()))
        self.relabel = relabel                   # first-read tombstones: from_seq_too_old
        self.ids = ids                           # events carry the composite cursor id
        self.first_read = set(self.cursors) if relabel else set()
        self.live: dict[str, bool] = {}          # was the topic's last read caught up
        self.deleted: set[str] = set()

    def cursor_id(self) -> bytes:
        return encode_cursor(self.cursors)

    def _event(self, event: str, data) -> WatchEvent:
        return WatchEvent(event, self.cursor_id() if self.ids else b"", data)

    def add(self, topic: str, from_seq: int) -> None:
        """Watch `topic` from `from_seq` (again: its state starts over)."""
        self.remove(topic)
        self.cursors[topic] = from_seq
        if self.relabel:
            self.first_read.add(topic)

    def remove(self, topic: str) -> bool:
        """Stop watching `topic`; False when it was not watched."""
        self.first_read.discard(topic)
        self.live.pop(topic, None)
        self.deleted.discard(topic)
        return self.cursors.pop(topic, None) is not None

    def read(self, topic: str, page: PageRead) -> list[WatchEvent]:
        """The events one read produced, advancing the topic's cursor."""
        out = []
        tomb = page.tombstone
        if tomb is not None:
            self.cursors[topic] = tomb["gap_to"]
            reason = "from_seq_too_old" if topic in self.first_read else tomb["reason"]
            out.append(self._event("tombstone", {
                "topic": topic, "reason": reason, "gap_from": tomb["gap_from"],
                "gap_to": tomb["gap_to"], "earliest_seq": tomb["earliest_seq"],
                "head_seq": tomb["head_seq"]}))
            self.live[topic] = False
        self.first_read.discard(topic)
        if page.records is not None:
            self.cursors[topic] = page.next_from_seq
            out.append(self._event("record", page.records))
            self.live[topic] = False
        elif tomb is None:
            self.cursors[topic] = page.next_from_seq
        if page.caught_up and not self.live.get(topic, False):
            out.append(self._event("caught-up", {"topic": topic, "head_seq": page.head_seq}))
            self.live[topic] = True
        return out

    def advance(self, topic: str, page: PageRead) -> None:
        """What read() does to the state for a page without tombstone, without making its
        events (a stream that was handed them already rendered)."""
        assert page.tombstone is None, "advance() is only for pages without a tombstone"
        self.first_read.discard(topic)
        self.cursors[topic] = page.next_from_seq
        if page.caught_up:
            self.live[topic] = True
        elif page.records is not None:
            self.live[topic] = False

    def delete(self, topic: str) -> WatchEvent:
        self.deleted.add(topic)
        return self._event("topic-deleted", {"topic": topic, "head_seq": 0,
                                             "reason": "deleted"})

    def finished(self) -> bool:
        return len(self.deleted) == len(self.cursors)
