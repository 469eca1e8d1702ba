"""The shards' commit notifications: what a commit made visible, for the gateways' watch
streams (docs/PROTOCOL.md 3.6).

Each shard listens on a feed socket next to its ipc request socket: a Unix stream socket
with the lane's framing (protocol/lane.py), read and written by the shard's own loop.
A gateway connects once per shard and writes subscription frames, the msgpack of
`[subscribed, [topic, ...]]`. After every commit that woke a subscribed topic (records
appended, a topic deleted) the shard writes to each of its subscribers one note frame, the
msgpack of `[topic, head, page]`: the topic's new visible head (nil when the topic is
gone), and the page a diff from the previous note's head reads now (nil when there is none
to give: the first note since the subscription, a tombstone, a page over PAGE_BYTES_MAX or
PAGE_RECORDS_MAX). A gateway serves a watcher sitting at exactly that previous head from
the page, with no read of its own; anyone else reads from its own cursor. A note only says
"look again" or "here is what is new": a lost one delays records, it never loses them.

Why not ZeroMQ PUB/SUB, which carried the feed before: a message between two processes
passes both sides' ZeroMQ I/O threads, three wake-ups where the feed socket has one, and
on this path every wake-up is latency a watcher sees.
"""

from __future__ import annotations

import dataclasses

import msgpack

from topics_actors.protocol.lane import path_beside
from topics_actors.protocol.packer import pack

SUBSCRIPTION_TOPICS_MAX = 1_000  # topics per subscription frame (a gateway sends more frames)
PAGE_BYTES_MAX = 64 * 1024       # payload bytes of the records a notification carries
PAGE_RECORDS_MAX = 256


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


def feed_path(ipc: str) -> str:
    """The feed socket of the shard whose request socket is `ipc` ("" when it has none):
    `ipc://<run>/shard-NN.sock` -> `<run>/shard-NN.feed`."""
    return path_beside(ipc, ".feed")


def encode_subscription(subscribed: bool, topics: list[str]) -> bytes:
    return pack([subscribed, topics])


def decode_subscription(raw: bytes) -> tuple[bool, list[str]] | None:
    """A subscription frame: (subscribed, topics), or None if it is malformed."""
    try:
        subscribed, topics = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if (type(subscribed) is not bool or not isinstance(topics, list)
            or not all(isinstance(t, str) for t in topics)):
        return None
    return subscribed, topics


def encode_note(topic: str, head: int | None, page: NotePage | None = None) -> bytes:
    return pack([topic, head, None if page is None else page.to_wire()])


def decode_note(raw: bytes) -> Note | None:
    """The note, or None for a malformed frame."""
    try:
        topic, head, page = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(topic, str):
        return None
    if head is not None and (not isinstance(head, int) or isinstance(head, bool)):
        return None
    if page is not None:
        if not isinstance(page, list) or len(page) != 6 or not isinstance(page[5], list):
            return None
        page = NotePage(*page)
    return Note(topic, head, page)
