"""The shards' commit notifications: what a commit made visible, for the gateways' watch
streams (docs/PROTOCOL.md 3.6).

After every commit that woke topics (records appended, a topic deleted) a shard publishes,
on an XPUB socket bound next to its ipc request socket, one two-frame message per topic:
frame 0 is the topic name followed by a NUL byte (so a SUB prefix filter matches one topic
exactly; names never contain NUL), frame 1 the msgpack of `[head, page]`: the topic's new
visible head (nil when the topic is gone), and, for a topic some gateway subscribes to,
the page a diff from the previous notification's head reads now (nil when there is none to
give: the first notification since the subscription, a tombstone, a page over
PAGE_BYTES_MAX or PAGE_RECORDS_MAX). A gateway serves a watcher sitting at exactly that
previous head from the page, with no read of its own; anyone else reads from its own
cursor. A notification only says "look again" or "here is what is new": a lost one delays
records, it never loses them.
"""

from __future__ import annotations

import dataclasses

import msgpack

FEED_HWM_MESSAGES = 10_000       # per subscriber; XPUB drops beyond it (never blocks)
SUBSCRIPTIONS_HWM = 100_000      # subscription messages a shard has yet to read
PAGE_BYTES_MAX = 64 * 1024       # payload bytes of the records a notification carries
PAGE_RECORDS_MAX = 256
_SOCK_SUFFIX = ".sock"


@dataclasses.dataclass(frozen=True, slots=True)
class NotePage:
    """The diff page from `from_seq` (the previous notification's head) as the shard read
    it when it published: every record after `from_seq`, up to the head (caught up), no
    tombstone. `records` are diff records with their tags ([seq, ts, envelope, tag, node,
    has_meta]); `bytes` their payload bytes (the diff's budget counts those);
    `node_filter`: the topic's dedupe_node (a reader's `node` would filter)."""
    from_seq: int
    head_seq: int
    earliest_seq: int
    node_filter: bool
    bytes: int
    records: list

    def to_wire(self) -> list:
        return [self.from_seq, self.head_seq, self.earliest_seq, self.node_filter,
                self.bytes, self.records]


@dataclasses.dataclass(frozen=True, slots=True)
class Note:
    topic: str
    head: int | None               # None: the topic is gone
    page: NotePage | None = None


def feed_endpoint(ipc: str) -> str:
    """The commit feed of the shard whose request socket is `ipc` ("" when it has none):
    `ipc://<run>/shard-NN.sock` -> `ipc://<run>/shard-NN.pub` (never longer, so it fits an
    AF_UNIX path whenever the request socket does)."""
    if not ipc:
        return ""
    base = ipc[:-len(_SOCK_SUFFIX)] if ipc.endswith(_SOCK_SUFFIX) else ipc
    return base + ".pub"


def topic_filter(topic: str) -> bytes:
    return topic.encode() + b"\0"


def encode_note(topic: str, head: int | None, page: NotePage | None = None) -> list[bytes]:
    return [topic_filter(topic),
            msgpack.packb([head, None if page is None else page.to_wire()])]


def decode_subscription(frame: bytes) -> tuple[bool, str] | None:
    """An XPUB subscription message: (subscribed, topic), or None if it names no topic."""
    if len(frame) < 2 or frame[0] not in (0, 1) or not frame.endswith(b"\0"):
        return None
    try:
        return frame[0] == 1, frame[1:-1].decode()
    except UnicodeDecodeError:
        return None


def decode_note(frames: list[bytes]) -> Note | None:
    """The note, or None for a malformed message."""
    if len(frames) != 2 or not frames[0].endswith(b"\0"):
        return None
    try:
        head, page = msgpack.unpackb(frames[1])
        topic = frames[0][:-1].decode()
    except (ValueError, TypeError, UnicodeDecodeError, msgpack.UnpackException):
        return None
    if head is not None and (not isinstance(head, int) or isinstance(head, bool)):
        return None
    if page is not None:
        if not isinstance(page, list) or len(page) != 6 or not isinstance(page[5], list):
            return None
        page = NotePage(*page)
    return Note(topic, head, page)
