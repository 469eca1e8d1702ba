"""The blocking client's one attempt (Client._call through status()): bounded by its
timeout even when ZeroMQ reports a reply that is gone by the time it is received (a
shard killed between the poll and the receive, seen in tools/crashtest)."""

from __future__ import annotations

import os

import pytest
import zmq

from topics_actors.client import Client
from topics_actors.client.retry_budget import RetryBudget
from topics_actors.client.shard_map import FRONT
from topics_actors.errors import ErrorCode, TopicsError, quarantined
from topics_actors.protocol import decode, encode_reply

pytestmark = pytest.mark.timeout(20)

STATUS = {"shard_count": 1, "node_ready": True, "shards": [
    {"shard": 0, "endpoint": "tcp://127.0.0.1:1", "incarnation": 1, "state": "ready"}]}


class VanishingPeer:
    """A front socket that says a reply is ready, then has none `vanish` times; after that
    it holds the reply to the last request. zmq_poll sees it through `fileno`: a pipe with
    a byte in it, always readable."""

    def __init__(self, vanish: int | None):
        self.vanish = vanish
        self.corr = 0
        self.receives = 0
        self._pipe = os.pipe()
        os.write(self._pipe[1], b"x")

    def fileno(self) -> int:
        return self._pipe[0]

    def send(self, raw: bytes, flags: int = 0) -> None:
        self.corr = decode(raw)[0]

    def poll(self, timeout_ms=None, flags=zmq.POLLIN) -> int:
        return flags

    def recv_multipart(self, flags: int = 0) -> list[bytes]:
        assert flags & zmq.NOBLOCK, "a blocking receive would wait here forever"
        self.receives += 1
        if self.vanish is None or self.receives <= self.vanish:
            raise zmq.Again()
        return [encode_reply(self.corr, STATUS)]

    def close(self, linger=None) -> None:
        for fd in self._pipe:
            os.close(fd)
        self._pipe = ()


class HandshakeWatchOff:
    """The front's handshake watch, for a peer that never fails one."""

    def failed(self) -> bool:
        return False

    def refusal(self, endpoint: str) -> None:
        return None

    def close(self) -> None:
        pass


def client_with(front: VanishingPeer) -> Client:
    client = Client("tcp://127.0.0.1:1", request_timeout_ms=100)
    transport = client._transport
    transport.close()          # the real front socket and its watch, replaced here
    transport._front = front
    transport._socks[FRONT] = (client.endpoint, front)
    transport._watch = HandshakeWatchOff()
    return client


def test_a_reply_gone_before_the_receive_ends_in_the_timeout_not_a_hang():
    client = client_with(VanishingPeer(vanish=None))
    with pytest.raises(TopicsError) as raised:
        client.status()
    assert raised.value.code == ErrorCode.NOT_READY and raised.value.retryable
    assert client._transport._front.receives > 1          # it went back to polling each time
    client.close()


def test_a_reply_after_a_vanished_one_is_still_taken():
    client = client_with(VanishingPeer(vanish=3))
    assert client.status()["shard_count"] == 1
    assert client._transport._front.receives == 4
    client.close()


def test_quarantined_is_final_and_not_ready_is_retried():
    """A quarantined topic waits for an operator: the library raises it at once."""
    budget = RetryBudget(10_000, "a request")
    with pytest.raises(TopicsError) as raised:
        budget.absorb(quarantined("t", "WAL frame fails its checks"))
    assert raised.value.code is ErrorCode.QUARANTINED and raised.value.status == 503
    assert budget.absorb(TopicsError("replaying", ErrorCode.NOT_READY)) is True
