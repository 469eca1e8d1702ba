"""Lanes from this shard to the node's other shards (protocol/lane.py), opened on first use:
how the router feed reads a source in another shard. A lane is a connection to the other
shard's lane socket, the one the gateways use (shard/lane_listener.py), written and read by
this shard's own loop. Why not a ZeroMQ DEALER, as before: a message between two
processes then passes both sides' I/O threads, four wake-ups where the lane has two.

A send to a shard that does not take the connection now (starting, stopped) is refused,
and the caller retries later. When a lane closes, `on_lost(shard)` is told: what was in
flight on it will not be answered. Sends never block: what the socket cannot take waits
in the lane's buffer, bounded as the listener's is.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

import zmq

from topics_actors.protocol.lane import FrameReader, LaneBroken, frame, lane_path
from topics_actors.shard.lane_listener import PENDING_BYTES_MAX, READ_BYTES, write_pending

log = logging.getLogger(__name__)

READS_PER_WAKE = 16          # reads of one ready lane per turn (a long page takes several)


class _Link:
    __slots__ = ("sock", "shard", "reader", "pending")

    def __init__(self, sock: socket.socket, shard: int):
        self.sock = sock
        self.shard = shard
        self.reader = FrameReader()
        self.pending = bytearray()


class LaneLinks:
    def __init__(self, run_dir: str, poller: zmq.Poller, on_lost: Callable[[int], None]):
        self.run_dir = run_dir
        self.poller = poller
        self.on_lost = on_lost
        self.links: dict[int, _Link] = {}      # by shard
        self.by_fd: dict[int, _Link] = {}
        self.opened = self.lost = 0

    def send(self, shard: int, raw: bytes) -> bool:
        """Write request `raw` to `shard` (False: its lane is not up; try again later)."""
        link = self.links.get(shard) or self._open(shard)
        if link is None:
            return False
        link.pending += frame(raw)
        return self._write(link)

    def ready(self, ready: list, on_reply: Callable[[bytes], None]) -> None:
        """Take what a poll found on the lanes: replies (each to `on_reply`), and room for
        requests that waited."""
        for fd, events in ready:
            link = self.by_fd.get(fd) if type(fd) is int else None
            if link is None:
                continue
            if events & zmq.POLLOUT and not self._write(link):
                continue
            if events & zmq.POLLIN:
                self._read(link, on_reply)

    def _open(self, shard: int) -> _Link | None:
        path = lane_path(f"ipc://{os.path.join(self.run_dir, f'shard-{shard:02d}.sock')}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)       # a Unix socket connects at once, or not now (EAGAIN)
        except OSError:
            sock.close()
            return None
        link = _Link(sock, shard)
        self.links[shard] = self.by_fd[sock.fileno()] = link
        self.poller.register(sock.fileno(), zmq.POLLIN)
        self.opened += 1
        return link

    def _read(self, link: _Link, on_reply: Callable[[bytes], None]) -> None:
        for _ in range(READS_PER_WAKE):
            try:
                data = link.sock.recv(READ_BYTES)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._drop(link)
                return
            try:
                raws = link.reader.feed(data)
            except LaneBroken as error:
                log.warning("event=lane_broken shard=%d reason=%s", link.shard, error)
                self._drop(link)
                return
            for raw in raws:
                on_reply(raw)

    def _write(self, link: _Link) -> bool:
        """Write what waits; False: the lane broke or stopped reading, and is dropped."""
        if not write_pending(link.sock, link.pending) or len(link.pending) > PENDING_BYTES_MAX:
            self._drop(link)
            return False
        self.poller.modify(link.sock.fileno(), zmq.POLLIN | (zmq.POLLOUT if link.pending else 0))
        return True

    def _drop(self, link: _Link) -> None:
        if self.links.get(link.shard) is not link:
            return
        del self.links[link.shard]
        del self.by_fd[link.sock.fileno()]
        self.poller.unregister(link.sock.fileno())
        link.sock.close()
        self.lost += 1
        self.on_lost(link.shard)

    def close(self) -> None:
        for link in list(self.links.values()):
            self.poller.unregister(link.sock.fileno())
            link.sock.close()
        self.links.clear()
        self.by_fd.clear()
