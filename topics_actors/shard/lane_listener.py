"""The shard's end of the lanes (protocol/lane.py): a listening Unix socket next to the ipc
request socket, and the connections the node's gateways open on it, read and written by
the shard's own loop (no thread).

The shard's poller watches the listening socket and every connection; `readable` takes
what a ready one holds, as (peer, requests) like a ROUTER's, where peer is LANE_TAG and
the connection's number. Replies are written at once; what the socket cannot take now
waits in the connection's buffer and goes out when the poller says it is writable. A
connection whose buffer passes PENDING_BYTES_MAX is a gateway that stopped reading: it is
closed, and the gateway retries on a new one.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from collections.abc import Callable

import zmq

from topics_actors.protocol.lane import FrameReader, LaneBroken, frames

log = logging.getLogger(__name__)

LANE_TAG = b"l"                    # the tag before a lane peer's identity (shard_server.py)
BACKLOG = 128
READ_BYTES = 256 * 1024
PENDING_BYTES_MAX = 64 * 1024 * 1024
_ID = struct.Struct(">I")


class _Lane:
    __slots__ = ("sock", "peer", "reader", "pending")

    def __init__(self, sock: socket.socket, peer: bytes):
        self.sock = sock
        self.peer = peer                 # its identity: never reused, unlike descriptors
        self.reader = FrameReader()
        self.pending = bytearray()


class LaneListener:
    """`on_drop(peer)`: told of each connection that closes (the commit feed forgets its
    subscriptions)."""

    def __init__(self, path: str, poller: zmq.Poller,
                 on_drop: Callable[[bytes], None] | None = None):
        self.path = path
        self.poller = poller
        self.on_drop = on_drop
        if os.path.exists(path):
            os.unlink(path)              # a previous incarnation's
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)            # the node's own processes only, as the ipc socket
        self.listener.listen(BACKLOG)
        self.listener.setblocking(False)
        poller.register(self.listener.fileno(), zmq.POLLIN)
        self.lanes: dict[int, _Lane] = {}         # by file descriptor
        self.by_id: dict[bytes, int] = {}         # peer identity -> file descriptor
        self.accepted = 0
        self.broken = 0

    def owns(self, fd) -> bool:
        return fd == self.listener.fileno() or fd in self.lanes

    def ready(self, fd: int, events: int) -> list[tuple[bytes, list[bytes]]]:
        """What a ready descriptor brings: new lanes accepted, requests read, or pending
        replies written."""
        if fd == self.listener.fileno():
            self._accept()
            return []
        lane = self.lanes.get(fd)
        if lane is None:
            return []
        if events & zmq.POLLOUT:
            self._write(fd, lane)
        if events & zmq.POLLIN:
            return self._read(fd, lane)
        return []

    def send(self, peer: bytes, raws: list[bytes]) -> bool:
        """Write replies to the lane `peer` names (False: it is gone)."""
        fd = self.by_id.get(peer)
        lane = self.lanes.get(fd) if fd is not None else None
        if lane is None:
            return False
        lane.pending += frames(raws)
        self._write(fd, lane)
        return fd in self.lanes

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            fd, self.accepted = sock.fileno(), self.accepted + 1
            peer = _ID.pack(self.accepted & 0xFFFFFFFF)
            self.lanes[fd] = _Lane(sock, peer)
            self.by_id[peer] = fd
            self.poller.register(fd, zmq.POLLIN)

    def _read(self, fd: int, lane: _Lane) -> list[tuple[bytes, list[bytes]]]:
        try:
            data = lane.sock.recv(READ_BYTES)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self._drop(fd)
            return []
        try:
            raws = lane.reader.feed(data)
        except LaneBroken as error:
            log.warning("event=lane_broken fd=%d reason=%s", fd, error)
            self.broken += 1
            self._drop(fd)
            return []
        return [(LANE_TAG + lane.peer, raws)] if raws else []

    def _write(self, fd: int, lane: _Lane) -> None:
        pending = lane.pending
        if not write_pending(lane.sock, pending):
            self._drop(fd)
            return
        if len(pending) > PENDING_BYTES_MAX:
            log.warning("event=lane_not_reading fd=%d pending=%d", fd, len(pending))
            self._drop(fd)
            return
        self.poller.modify(fd, zmq.POLLIN | (zmq.POLLOUT if pending else 0))

    def _drop(self, fd: int) -> None:
        lane = self.lanes.pop(fd, None)
        if lane is None:
            return
        self.by_id.pop(lane.peer, None)
        self.poller.unregister(fd)
        lane.sock.close()
        if self.on_drop is not None:
            self.on_drop(lane.peer)

    def close(self) -> None:
        for fd in list(self.lanes):
            self._drop(fd)
        self.poller.unregister(self.listener.fileno())
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def write_pending(sock: socket.socket, pending: bytearray) -> bool:
    """Write as much of `pending` as the socket takes now, removing what went; False: the
    connection is broken."""
    while pending:
        try:
            sent = sock.send(pending)
        except BlockingIOError:
            return True
        except OSError as error:
            if error.errno not in (errno.EPIPE, errno.ECONNRESET):
                log.warning("event=lane_write_failed fd=%d errno=%d", sock.fileno(),
                            error.errno)
            return False
        del pending[:sent]
    return True
