"""The group-commit window's short waits (shard_server.poll_briefly): ZeroMQ's poll counts
whole milliseconds and truncates, so a 0.3 ms poll returns at once and the window's quiet
slice would never wait. poll_briefly waits at least the time asked, and still reports what
is waiting."""

from __future__ import annotations

import time

import pytest
import zmq

from topics_actors.shard.shard_server import poll_briefly

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def pair():
    ctx = zmq.Context()
    reader, writer = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    reader.bind("inproc://brief")
    writer.connect("inproc://brief")
    poller = zmq.Poller()
    poller.register(reader, zmq.POLLIN)
    yield poller, reader, writer
    reader.close(0)
    writer.close(0)
    ctx.term()


@pytest.mark.parametrize("wait_ms", [0.05, 0.3, 0.9, 1.5])
def test_a_wait_with_nothing_to_read_lasts_at_least_its_length(pair, wait_ms):
    poller = pair[0]
    for _ in range(5):
        t0 = time.perf_counter()
        assert poll_briefly(poller, wait_ms) == []
        assert (time.perf_counter() - t0) * 1000 >= wait_ms


@pytest.mark.parametrize("wait_ms", [0.3, 2.0])
def test_a_waiting_message_is_reported(pair, wait_ms):
    poller, reader, writer = pair
    writer.send(b"x")
    assert poller.poll(5000)                  # it has arrived
    assert poll_briefly(poller, wait_ms) == [(reader, zmq.POLLIN)]
    assert reader.recv() == b"x"
