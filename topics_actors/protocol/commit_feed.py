"""The shards' commit notifications: what a commit made visible, for the gateways' watch
streams (docs/PROTOCOL.md 3.6).

After every commit that woke topics (records appended, a topic deleted) a shard publishes,
on a PUB socket bound next to its ipc request socket, one two-frame message per topic:
frame 0 is the topic name followed by a NUL byte (so a SUB prefix filter matches one topic
exactly; names never contain NUL), frame 1 the msgpack of the topic's new head, or nil when
the topic is gone. A notification only says "look again": a watcher reads from its own
cursor up to the head, so a lost notification delays records, it never loses them.
"""

from __future__ import annotations

import msgpack

FEED_HWM_MESSAGES = 10_000       # per subscriber; PUB drops beyond it (never blocks)
_SOCK_SUFFIX = ".sock"


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


def encode_note(topic: str, head: int | None) -> list[bytes]:
    return [topic_filter(topic), msgpack.packb(head)]


def decode_note(frames: list[bytes]) -> tuple[str, int | None] | None:
    """(topic, head or None when deleted), or None for a malformed message."""
    if len(frames) != 2 or not frames[0].endswith(b"\0"):
        return None
    try:
        head = msgpack.unpackb(frames[1])
        topic = frames[0][:-1].decode()
    except (ValueError, UnicodeDecodeError, msgpack.UnpackException):
        return None
    if head is not None and (not isinstance(head, int) or isinstance(head, bool)):
        return None
    return topic, head
