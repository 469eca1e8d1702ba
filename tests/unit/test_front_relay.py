"""The front's relay with real sockets: a request that reaches the front together with the
map that makes its shard ready waits for the connection to that shard instead of being
refused "cannot be reached" (the race a client saw right after the node said it was ready).
"""

from __future__ import annotations

import threading

import pytest
import zmq

from supervisor.front_core import FrontCore
from supervisor.front_relay import FrontRelay
from topics_actors.protocol import decode_reply, encode, encode_reply
from topics_actors.protocol.envelope import with_corr
from topics_actors.protocol.messages import GetTopic

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


def test_a_request_with_the_new_map_waits_for_its_shards_connection(tmp_path):
    ctx = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.setsockopt(zmq.LINGER, 0)
    port = front.bind_to_random_port("tcp://127.0.0.1")
    relay = FrontRelay(ctx, front, FrontCore())
    endpoint = f"ipc://{tmp_path}/shard-00.sock"
    bound, stop = threading.Event(), threading.Event()
    shard = threading.Thread(target=_fake_shard, args=(ctx, endpoint, bound, stop))
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    try:
        client.connect(f"tcp://127.0.0.1:{port}")
        client.send(encode(GetTopic("t"), 7))   # waits in the front's queue for the map
        shard.start()
        relay.publish_map({"shard_count": 1, "shards": [
            {"shard": 0, "state": "ready", "incarnation": 1, "ipc": endpoint}]})
        relay.start()
        assert client.poll(5_000), "no answer through the front"
        corr, body = decode_reply(client.recv())
        assert (corr, body) == (7, {"answered": True})
        assert bound.is_set()
    finally:
        stop.set()
        relay.stop()
        if shard.is_alive():
            shard.join(5)
        client.close(0)
        ctx.term()
