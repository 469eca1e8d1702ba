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


def test_a_shard_ready_for_a_while_is_not_waited_for_at_every_map(tmp_path):
    """The supervisor publishes its map every turn. A shard the map has called ready for a
    while but that cannot be reached (it died and is not reaped yet) must not hold up the
    requests for the other shards at each new map."""
    ctx = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    front.setsockopt(zmq.LINGER, 0)
    port = front.bind_to_random_port("tcp://127.0.0.1")
    relay = FrontRelay(ctx, front, FrontCore())
    live, dead = f"ipc://{tmp_path}/shard-00.sock", f"ipc://{tmp_path}/shard-01.sock"
    bound, stop = threading.Event(), threading.Event()
    shard = threading.Thread(target=_fake_shard, args=(ctx, live, bound, stop))
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    name = next(f"t{i}" for i in range(1000) if shard_of_name(f"t{i}", 2) == 0)

    def a_map() -> dict:    # a new object each time, as the supervisor's turns make it
        return {"shard_count": 2, "shards": [
            {"shard": 0, "state": "ready", "incarnation": 1, "ipc": live},
            {"shard": 1, "state": "ready", "incarnation": 1, "ipc": dead}]}
    try:
        client.connect(f"tcp://127.0.0.1:{port}")
        shard.start()
        relay.publish_map(a_map())
        relay.start()
        for corr in range(1, 4):
            relay.publish_map(a_map())
            t0 = time.monotonic()
            client.send(encode(GetTopic(name), corr))
            assert client.poll(5_000), "no answer through the front"
            assert decode_reply(client.recv()) == (corr, {"answered": True})
            if corr > 1:   # the first map waited for both shards once, as it should
                assert time.monotonic() - t0 < CONNECT_WAIT_MS / 1000 / 2
    finally:
        stop.set()
        relay.stop()
        if shard.is_alive():
            shard.join(5)
        client.close(0)
        ctx.term()


def test_several_requests_in_one_message_are_each_forwarded_and_answered(tmp_path):
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
        shard.start()
        relay.publish_map({"shard_count": 1, "shards": [
            {"shard": 0, "state": "ready", "incarnation": 1, "ipc": endpoint}]})
        relay.start()
        client.send_multipart([encode(GetTopic(f"t{corr}"), corr) for corr in (1, 2, 3)])
        answered = {}
        while len(answered) < 3:
            assert client.poll(5_000), "no answer through the front"
            for raw in client.recv_multipart():
                corr, body = decode_reply(raw)
                answered[corr] = body
        assert answered == {corr: {"answered": True} for corr in (1, 2, 3)}
    finally:
        stop.set()
        relay.stop()
        if shard.is_alive():
            shard.join(5)
        client.close(0)
        ctx.term()
