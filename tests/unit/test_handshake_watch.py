"""A connection cut during the ZeroMQ handshake is a network fault, not a refusal.

tools.jepsen's 30-minute run saw one write answered `unauthorized` on a cluster with no
keys at all: libzmq reports a peer that closes the connection in the middle of the
handshake (a node killed, a link cut) as HANDSHAKE_FAILED_NO_DETAIL (ECONNRESET, EPIPE),
and the client's handshake watch took every handshake failure for a refused key. Now only
the failures that mean a refusal count (the server's ZAP said no, or the ZMTP handshake
itself failed: a wrong server key, CURVE on one side only); a cut connection is silence,
retried like any other.

Method: a raw TCP listener that accepts every connection and closes it at once, so each of
the client's handshakes fails with no detail; the client's first request must end as
`no_node` (not_ready), never `unauthorized`.
"""

from __future__ import annotations

import socket
import threading

import pytest

from topics_actors.client import Client
from topics_actors.errors import ErrorCode, TopicsError

pytestmark = pytest.mark.timeout(30)


class ClosingListener(threading.Thread):
    """Accepts TCP connections on loopback and closes each at once."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.closed = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.close()
            self.closed += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        self.sock.close()


def test_a_connection_closed_during_the_handshake_is_not_reported_as_unauthorized():
    listener = ClosingListener()
    listener.start()
    client = Client(f"tcp://127.0.0.1:{listener.port}", request_timeout_ms=1500,
                    connect_timeout_ms=1500, retry_deadline_ms=1500)
    try:
        with pytest.raises(TopicsError) as raised:
            client.status()
        assert listener.closed >= 1, "no handshake was cut: the test tried nothing"
        assert raised.value.code is ErrorCode.NOT_READY, raised.value
    finally:
        client.close()
        listener.stop()
