"""The front's relay with real sockets: a request that reaches the front together with the
map that makes its shard ready waits for the connection to that shard instead of being
refused "cannot be reached" (the race a client saw right after the node said it was ready);
a message carrying several requests has each forwarded and answered.
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from supervisor.front_core import FrontCore
from supervisor.front_relay import CONNECT_WAIT_MS, FrontRelay
from topics_actors.protocol import decode_reply, encode, encode_reply
from topics_actors.protocol.envelope import with_corr
from topics_actors.protocol.messages import GetTopic
from topics_actors.topic_identity import shard_of_name

pytestmark = pytest.mark.timeout(30)

SHARD_BINDS_AFTER_S = 0.15


def _fake_shard(ctx: zmq.Context, endpoint: str, bound: threading.Event,
                stop: threading.Event) -> None:
    """Bind late, then answer every request {"answered": True} under its own corr."""
    stop.wait(SHARD_BINDS_AFTER_S)
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    bound.set()
    try:
        while not stop.is_set():
            if not sock.poll(20):
                continue
            peer, raw = sock.recv_multipart()
            corr = with_corr(raw, 0)[0]
            sock.send_multipart([peer, encode_reply(corr, {"answered": True})])
    finally:
        sock.close(0)


class Rig:
    """A FrontRelay on a TCP port (not started), a fake shard to bind late at shard 0's
    ipc endpoint (not started; shard 1's endpoint stays dead) and a client DEALER
    connected to the front."""

    def __init__(self, tmp_path):
        self.ctx = zmq.Context()
        front = self.ctx.socket(zmq.ROUTER)
        front.setsockopt(zmq.LINGER, 0)
        port = front.bind_to_random_port("tcp://127.0.0.1")
        self.relay = FrontRelay(self.ctx, front, FrontCore())
        self.live = f"ipc://{tmp_path}/shard-00.sock"
        self.dead = f"ipc://{tmp_path}/shard-01.sock"
        self.bound, self.stop = threading.Event(), threading.Event()
        self.shard = threading.Thread(target=_fake_shard,
                                      args=(self.ctx, self.live, self.bound, self.stop))
        self.client = self.ctx.socket(zmq.DEALER)
        self.client.setsockopt(zmq.LINGER, 0)
        self.client.connect(f"tcp://127.0.0.1:{port}")

    def one_shard(self) -> dict:
        return {"shard_count": 1, "shards": [
            {"shard": 0, "state": "ready", "incarnation": 1, "ipc": self.live}]}

    def close(self) -> None:
        self.stop.set()
        self.relay.stop()
        if self.shard.is_alive():
            self.shard.join(5)
        self.client.close(0)
        self.ctx.term()


@pytest.fixture
def rig(tmp_path):
    made = Rig(tmp_path)
    yield made
    made.close()


def test_a_request_with_the_new_map_waits_for_its_shards_connection(rig):
    rig.client.send(encode(GetTopic("t"), 7))   # waits in the front's queue for the map
    rig.shard.start()
    rig.relay.publish_map(rig.one_shard())
    rig.relay.start()
    assert rig.client.poll(5_000), "no answer through the front"
    corr, body = decode_reply(rig.client.recv())
    assert (corr, body) == (7, {"answered": True})
    assert rig.bound.is_set()


def test_a_shard_ready_for_a_while_is_not_waited_for_at_every_map(rig):
    """The supervisor publishes its map every turn. A shard the map has called ready for a
    while but that cannot be reached (it died and is not reaped yet) must not hold up the
    requests for the other shards at each new map."""
    name = next(f"t{i}" for i in range(1000) if shard_of_name(f"t{i}", 2) == 0)

    def a_map() -> dict:    # a new object each time, as the supervisor's turns make it
        return {"shard_count": 2, "shards": [
            {"shard": 0, "state": "ready", "incarnation": 1, "ipc": rig.live},
            {"shard": 1, "state": "ready", "incarnation": 1, "ipc": rig.dead}]}
    rig.shard.start()
    rig.relay.publish_map(a_map())
    rig.relay.start()
    for corr in range(1, 4):
        rig.relay.publish_map(a_map())
        t0 = time.monotonic()
        rig.client.send(encode(GetTopic(name), corr))
        assert rig.client.poll(5_000), "no answer through the front"
        assert decode_reply(rig.client.recv()) == (corr, {"answered": True})
        if corr > 1:   # the first map waited for both shards once, as it should
            assert time.monotonic() - t0 < CONNECT_WAIT_MS / 1000 / 2


def test_several_requests_in_one_message_are_each_forwarded_and_answered(rig):
    rig.shard.start()
    rig.relay.publish_map(rig.one_shard())
    rig.relay.start()
    rig.client.send_multipart([encode(GetTopic(f"t{corr}"), corr) for corr in (1, 2, 3)])
    answered = {}
    while len(answered) < 3:
        assert rig.client.poll(5_000), "no answer through the front"
        for raw in rig.client.recv_multipart():
            corr, body = decode_reply(raw)
            answered[corr] = body
    assert answered == {corr: {"answered": True} for corr in (1, 2, 3)}
