"""The lane: a node-local stream socket between a gateway's event loop and a shard's loop,
carrying the same request and reply envelopes as the shard's ipc ROUTER (docs/PROTOCOL.md
3.8), each preceded by its length.

Why a lane beside ZeroMQ: a ZeroMQ message between two processes passes through each
side's I/O thread, so a request and its reply wake six threads (the sender's loop, its I/O
thread, the receiver's I/O thread and loop, and back), and on a 2-core machine those
wake-ups were most of a request's time. On the lane the gateway's loop writes to the socket
and the shard's loop reads it: two wake-ups a round trip. The lane is a Unix socket next to
the shard's ipc socket, with the same 0600 mode and the same trust (the node's own
processes); the commit feed (protocol/commit_feed.py) uses the same framing on a socket of
its own. ZeroMQ stays the protocol of clients, the front, other nodes and every other link
of the node.

Frames: a 4-byte big-endian length, then that many bytes: one request envelope (gateway to
shard) or one reply envelope (shard to gateway). Several frames may come in one write.
"""

from __future__ import annotations

import struct

from topics_actors.limits import MESSAGE_BYTES_MAX

FRAME_BYTES_MAX = 2 * MESSAGE_BYTES_MAX   # a longer frame ends the connection (as MAXMSGSIZE)
_LENGTH = struct.Struct(">I")
_IPC_PREFIX, _SOCK_SUFFIX = "ipc://", ".sock"


class LaneBroken(Exception):
    """A frame longer than FRAME_BYTES_MAX: the peer is not speaking the lane's framing."""


def lane_path(ipc: str) -> str:
    """The lane of the shard whose request socket is `ipc` ("" when it has none):
    `ipc://<run>/shard-NN.sock` -> `<run>/shard-NN.lane`."""
    return path_beside(ipc, ".lane")


def path_beside(ipc: str, suffix: str) -> str:
    """The path of a Unix socket next to the shard request socket `ipc`, named by `suffix`
    in place of `.sock` ("" when `ipc` is not an ipc endpoint). Never longer than the ipc
    path when `suffix` is 5 bytes, so it fits an AF_UNIX address whenever that does."""
    if not ipc.startswith(_IPC_PREFIX):
        return ""
    path = ipc[len(_IPC_PREFIX):]
    base = path[:-len(_SOCK_SUFFIX)] if path.endswith(_SOCK_SUFFIX) else path
    return base + suffix


def frame(raw: bytes) -> bytes:
    return _LENGTH.pack(len(raw)) + raw


def frames(raws: list[bytes]) -> bytes:
    """Several envelopes as one write."""
    pack = _LENGTH.pack
    return b"".join(part for raw in raws for part in (pack(len(raw)), raw))


class FrameReader:
    """Cuts a byte stream into envelopes as it comes."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The envelopes `data` completes (LaneBroken on a frame over FRAME_BYTES_MAX)."""
        buffer = self._buffer
        if not buffer and len(data) >= 4:
            out, pos = _cut(data, 0)      # the common case: whole frames, nothing kept
            if pos == len(data):
                return out
            buffer += memoryview(data)[pos:]
            return out
        buffer += data
        out, pos = _cut(buffer, 0)
        del buffer[:pos]
        return out


def _cut(data, pos: int) -> tuple[list[bytes], int]:
    out, end, unpack = [], len(data), _LENGTH.unpack_from
    while end - pos >= 4:
        (length,) = unpack(data, pos)
        if length > FRAME_BYTES_MAX:
            raise LaneBroken(f"a lane frame of {length} bytes")
        if end - pos - 4 < length:
            break
        out.append(bytes(data[pos + 4:pos + 4 + length]))
        pos += 4 + length
    return out, pos
