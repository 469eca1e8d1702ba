"""The lane between a gateway and a shard (protocol/lane.py): its framing, the shard's
listener (shard/lane_listener.py) and the client's connection (client/lane_connection.py)
on real Unix sockets in a temp dir.

Method: the listener is driven by a zmq.Poller as the shard's loop drives it; the client
side runs in the test's event loop; replies are made by hand from the requests read.
"""

import asyncio
import os
import socket
import threading

import pytest
import zmq

from topics_actors.client.lane_connection import LaneConnection
from topics_actors.protocol import decode, encode, encode_reply
from topics_actors.protocol.lane import (
    FRAME_BYTES_MAX, FrameReader, LaneBroken, frame, frames, lane_path,
)
from topics_actors.protocol.messages import GetTopic
from topics_actors.shard import lane_listener
from topics_actors.shard.lane_listener import LANE_TAG, LaneListener

pytestmark = pytest.mark.timeout(30)


def test_frames_are_cut_wherever_the_stream_splits():
    raws = [b"a", b"", b"x" * 70_000, b"end"]
    stream = frames(raws)
    for step in (1, 3, 4, 5, 1000, len(stream)):
        reader, got = FrameReader(), []
        for at in range(0, len(stream), step):
            got += reader.feed(stream[at:at + step])
        assert got == raws, step
    assert frame(b"abc") == b"\0\0\0\x03abc"


def test_a_frame_over_the_limit_breaks_the_lane():
    with pytest.raises(LaneBroken):
        FrameReader().feed((FRAME_BYTES_MAX + 1).to_bytes(4, "big") + b"x")


def test_the_lane_lives_next_to_the_ipc_socket():
    assert lane_path("ipc:///run/x/shard-02.sock") == "/run/x/shard-02.lane"
    assert lane_path("tcp://127.0.0.1:4001") == "" and lane_path("") == ""


class Shard:
    """The listener in a thread, answering every GetTopic with its name."""

    def __init__(self, path: str):
        self.poller = zmq.Poller()
        self.listener = LaneListener(path, self.poller)
        self.stop = threading.Event()
        self.peers = set()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            for fd, events in self.poller.poll(20):
                for peer, raws in self.listener.ready(fd, events):
                    assert peer.startswith(LANE_TAG)
                    self.peers.add(peer)
                    replies = [encode_reply(corr, {"topic": msg.topic})
                               for corr, msg in map(decode, raws)]
                    self.listener.send(peer[1:], replies)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.listener.close()


def test_requests_and_replies_travel_the_lane(tmp_path):
    path = str(tmp_path / "shard-00.lane")
    shard = Shard(path)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"

    async def go():
        conn = LaneConnection(path, 16)
        futures = []
        for corr in range(1, 6):       # one pass: the first at once, the rest together
            futures.append(conn.expect(corr, 5))
            assert await conn.send_when_connected(encode(GetTopic(f"t{corr}"), corr),
                                                  corr, 5000)
        replies = await asyncio.gather(*futures)
        conn.close()
        return replies
    try:
        assert [r["topic"] for r in asyncio.run(go())] == [f"t{i}" for i in range(1, 6)]
        assert len(shard.peers) == 1
    finally:
        shard.close()
    assert not os.path.exists(path)


def test_a_lane_the_shard_closes_ends_its_waits_at_once(tmp_path):
    path = str(tmp_path / "shard-00.lane")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    async def go():
        conn = LaneConnection(path, 16)
        future = conn.expect(1, 30)
        assert await conn.send_when_connected(encode(GetTopic("t"), 1), 1, 5000)
        peer, _ = await asyncio.get_running_loop().run_in_executor(None, server.accept)
        peer.close()                   # the shard dies with the request in flight
        reply = await asyncio.wait_for(future, 5)
        return reply, conn.closed
    try:
        assert asyncio.run(go()) == (None, True)
    finally:
        server.close()


def test_no_lane_refuses_sends_and_the_wait_gives_up(tmp_path):
    async def go():
        conn = LaneConnection(str(tmp_path / "absent.lane"), 16)
        sent = conn.send(b"x", 1)
        waited = await conn.send_when_connected(b"x", 1, 200)
        conn.close()
        return sent, waited
    assert asyncio.run(go()) == (False, False)


def test_replies_the_socket_cannot_take_wait_and_a_reader_that_stops_is_dropped(
        tmp_path, monkeypatch):
    monkeypatch.setattr(lane_listener, "PENDING_BYTES_MAX", 4 * 1024 * 1024)
    path = str(tmp_path / "shard-00.lane")
    poller = zmq.Poller()
    listener = LaneListener(path, poller)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    try:
        for fd, events in poller.poll(1000):
            listener.ready(fd, events)                 # accepted
        client.sendall(frame(encode(GetTopic("t"), 1)))
        peer = next(p for fd, ev in poller.poll(1000) for p, _ in listener.ready(fd, ev))
        big = [b"r" * 1024 * 1024]
        assert listener.send(peer[1:], big)            # more than the socket buffer holds
        lane = next(iter(listener.lanes.values()))
        assert lane.pending                             # the rest waits for POLLOUT
        while listener.send(peer[1:], big):            # the client never reads
            pass
        assert not listener.lanes and listener.by_id == {}
    finally:
        client.close()
        listener.close()
