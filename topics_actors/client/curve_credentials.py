"""A client's CURVE keys, and telling a refused handshake from an absent node.

A node with TOPICS_ZMQ_CLIENT_KEYS serves its TCP sockets as a CURVE server: a client gives
the node's public key (Z85, or the path of a file holding it, such as the node's
`curve/server.public`) and its own key pair, listed in that variable. Without them, or with
a key the node does not list, the handshake fails and nothing is ever answered; the
HandshakeWatch on the front's socket hears why, so the first request fails at once with
`unauthorized` instead of "no node".
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from topics_actors.errors import ErrorCode, TopicsError, invalid

KEY_CHARS = 40
WATCH_SLICE_MS = 50            # how often a wait for a connection looks at the watch
_WATCHES = itertools.count()
_FAILED = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused this client's key (not in its "
                                     "TOPICS_ZMQ_CLIENT_KEYS)",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed the handshake (a wrong server key, or "
                                         "one side uses CURVE and the other does not)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed the handshake",
}


def _key(value: str | bytes | None, what: str) -> bytes | None:
    """A Z85 key given as text, bytes, or the path of a file that holds it."""
    if value is None:
        return None
    text = value.decode() if isinstance(value, bytes) else value
    if len(text) != KEY_CHARS and os.path.isfile(text):
        with open(text, "rb") as handle:
            text = handle.read().decode("ascii", "replace").strip()
    if len(text) != KEY_CHARS:
        raise invalid(f"{what} must be a Z85 CURVE key ({KEY_CHARS} characters) or the path "
                      f"of a file holding one")
    return text.encode("ascii")


@dataclasses.dataclass(frozen=True)
class CurveCredentials:
    server_public: bytes
    public: bytes
    secret: bytes = dataclasses.field(repr=False)

    @classmethod
    def of(cls, server_key, public_key, secret_key) -> "CurveCredentials | None":
        """None when no key is given; all three or none."""
        keys = (_key(server_key, "curve_server_key"), _key(public_key, "curve_public_key"),
                _key(secret_key, "curve_secret_key"))
        if not any(keys):
            return None
        if not all(keys):
            raise invalid("CURVE needs curve_server_key, curve_public_key and "
                          "curve_secret_key together")
        return cls(*keys)

    def apply(self, sock: zmq.Socket, endpoint: str) -> None:
        """Make `sock` a CURVE client, for a TCP endpoint (ipc sockets are not CURVE)."""
        if endpoint.startswith("tcp://"):
            sock.curve_serverkey = self.server_public
            sock.curve_publickey = self.public
            sock.curve_secretkey = self.secret


def wait_slices(timeout_ms: float):
    """The pieces, WATCH_SLICE_MS at most, of a wait of `timeout_ms` that looks at a watch
    between them (both clients' waits for a connection to the front)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while (left_ms := (deadline - time.monotonic()) * 1000) > 0:
        yield min(left_ms, WATCH_SLICE_MS)


class HandshakeWatch:
    """The handshake failures of one socket that mean a refusal (a ZeroMQ monitor, read
    without blocking). A connection the peer closes during the handshake (a node killed, a
    link cut: ECONNRESET, EPIPE) also fails it with no detail: on a socket without CURVE
    that is only a network fault, retried like silence. With CURVE it counts, since a
    server that cannot read the client's hello (a wrong server key) fails it the same way."""

    def __init__(self, sock: zmq.Socket):
        self.sock = sock
        curve = sock.getsockopt(zmq.MECHANISM) == zmq.CURVE
        self.events = {event: reason for event, reason in _FAILED.items()
                       if curve or event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL}
        address = f"inproc://topics-handshake-{os.getpid()}-{next(_WATCHES)}"
        sock.monitor(address, sum(self.events))
        self.pair = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
        self.pair.setsockopt(zmq.LINGER, 0)
        self.pair.connect(address)
        self.reason: str | None = None

    def failed(self) -> bool:
        """Whether a handshake failed since the last refusal() (reads without blocking)."""
        while self.pair is not None:
            try:
                event = recv_monitor_message(self.pair, zmq.NOBLOCK)["event"]
            except zmq.ZMQError:      # Again: nothing (more) heard
                break
            self.reason = self.events.get(event, self.reason)
        return self.reason is not None

    def refusal(self, endpoint: str) -> TopicsError | None:
        """`unauthorized` if a handshake with `endpoint` failed since the last call."""
        if not self.failed():
            return None
        reason, self.reason = self.reason, None
        return TopicsError(f"the node at {endpoint} {reason}", ErrorCode.UNAUTHORIZED,
                           {"endpoint": endpoint})

    def close(self) -> None:
        if self.pair is None:
            return
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.pair.close(0)
        self.pair = None
