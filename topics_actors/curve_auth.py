"""CURVE on a process's client-facing TCP sockets: the ZAP handler that admits only the
public keys of TOPICS_ZMQ_CLIENT_KEYS, and the socket options of a CURVE server.

ZeroMQ asks the ZAP handler of the socket's context at every handshake; an unknown key
fails the handshake, so nothing of its requests ever reaches the process. A connection
that passed carries its key as the `User-Id` property of every message, which the request
checks (client_keys.ClientKeyRing.authorize) read. ipc sockets are not CURVE servers and
are not asked about (their 0600 files are their protection).

In a cluster the shards also admit `peers`: the keys other nodes registered in ZooKeeper
(their own server keys, under which their shards fetch from ours), trusted like this node's
own processes; the supervisor keeps the set current.
"""

from __future__ import annotations

import logging

import zmq

from topics_actors.client_keys import ClientKeyRing
from topics_actors.server_keys import ServerKeys

ZAP_DOMAIN = b"topics"


class CurveAuth:
    def __init__(self, ctx: zmq.Context, ring: ClientKeyRing, keys: ServerKeys):
        self.ring = ring
        self.keys = keys
        self.peers: frozenset[str] = frozenset()   # other nodes' keys (a cluster's shards)
        from zmq.auth.thread import ThreadAuthenticator   # here: a node without keys skips it
        self._zap = ThreadAuthenticator(ctx, log=logging.getLogger(__name__))
        self._zap.start()
        self._zap.configure_curve_callback(domain=ZAP_DOMAIN.decode(),
                                           credentials_provider=self)

    def callback(self, _domain: str, public: bytes) -> bool:
        """The ZAP handler's question: is this client's public key (Z85) allowed?"""
        key = public.decode("ascii", "replace")
        return self.ring.allows(key) or key in self.peers

    def serve(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE server (before it binds)."""
        sock.curve_secretkey = self.keys.secret
        sock.curve_publickey = self.keys.public
        sock.curve_server = True
        sock.zap_domain = ZAP_DOMAIN

    def stop(self) -> None:
        self._zap.stop()


def identity_of(frame: zmq.Frame) -> str | None:
    """The public key (Z85) a message came in under, or None (no CURVE)."""
    try:
        return frame.get("User-Id")
    except zmq.ZMQError:
        return None
