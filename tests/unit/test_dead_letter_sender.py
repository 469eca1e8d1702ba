"""The shell's sender of dead-letter moves to another shard (shard/queues/dead_letter_sender.py).

Method: a real ShardHarness owns the queue (shard 0 of 2); the test plays shard 1 with a
ROUTER socket bound where the sender looks for it (the ipc sibling of shard 0's socket),
answering an error first, then silence, then success. Time is the sender's own monotonic
clock; its retry and timeout constants are lowered for the test.
"""

from __future__ import annotations

import os

import pytest
import zmq

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol import decode, encode_error, encode_reply
from topics_actors.protocol.messages import Append, Claim
from topics_actors.shard.queues import dead_letter_sender
from topics_actors.shard.queues.dead_letter_moves import MoveDone
from topics_actors.shard.queues.dead_letter_sender import DeadLetterSender
from topics_actors.topic_identity import shard_of_name
from tests.support import wait_for
from tools.testing.manual_clock import ManualClock
from tests.unit.test_queue_ops import rec

pytestmark = pytest.mark.timeout(30)


def test_moves_are_sent_retried_and_finished(env, tmp_path, monkeypatch):
    monkeypatch.setattr(dead_letter_sender, "RETRY_MS", 1)
    monkeypatch.setattr(dead_letter_sender, "TIMEOUT_MS", 200)
    clock = ManualClock()
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    env.layout(2)
    owner = env.shard(0, 2, clock=clock).start()
    owner.put("q0", type="queue", lease_ms=100, max_deliveries=1, dead_letter=dead)
    owner.append("q0", rec(b'"job"'))
    owner.call(Claim("q0", "w", 1))
    clock.now += 101
    owner.call(Claim("q0", "w", 1))
    ctx = zmq.Context()
    peer = ctx.socket(zmq.ROUTER)
    peer.bind(f"ipc://{tmp_path}/shard-01.sock")
    done = []
    sender = DeadLetterSender(owner.core.queues.moves, ctx, os.path.join(tmp_path, "x.sock"),
                              2, done.append)
    try:
        def receive():
            sender.pump()
            return peer.poll(10) and peer.recv_multipart()
        ident, raw = wait_for(receive, 10, "the first send")
        corr, msg = decode(raw)
        assert isinstance(msg, Append) and msg.topic == dead and msg.create is True
        assert msg.idempotency_key.startswith("dead-letter:")
        peer.send_multipart([ident, encode_error(corr, TopicsError("full", ErrorCode.TOPIC_FULL))])
        ident, raw = wait_for(receive, 10, "a resend after the error")
        assert decode(raw)[1] == msg and done == [] and sender.failed == 1
        ident, raw = wait_for(receive, 10, "a resend after silence")   # no answer given
        peer.send_multipart([ident, encode_reply(decode(raw)[0], {"deduped": False})])
        wait_for(lambda: sender.pump() or done, 10, "the move to finish")
        assert done == [MoveDone("q0", 1)]
        owner.call(done[0])
        assert owner.get("q0")["queue"]["dead_lettered"] == 1
        sender.pump()
        left = peer.poll(50) and decode(peer.recv_multipart()[1])
        assert not left, left
    finally:
        sender.close()
        peer.close(0)
        ctx.term()
        owner.crash()
