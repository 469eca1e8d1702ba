"""DEALER sockets from a shard to other shards, opened on first use: the shell's way to send
requests of its own making to another shard, over ipc to the node's shards (dead-letter
moves) or over TCP to other nodes' (replica fetches). Sends
and receives never block; high-water marks bound what waits in either direction. Toward a
node that serves CURVE (client keys configured) the socket is a CURVE client under this
node's own key pair, which the other node admits as a peer (docs/CLUSTER.md, security).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import zmq

from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply
from topics_actors.server_keys import ServerKeys

HWM_MESSAGES = 1_000


class PeerSockets:
    def __init__(self, ctx: zmq.Context, own_ipc_path: str | None = None):
        self.ctx = ctx
        self.run_dir = os.path.dirname(own_ipc_path) if own_ipc_path else ""
        self.sockets: dict[int | str, zmq.Socket] = {}

    def socket(self, shard: int) -> zmq.Socket:
        """A shard of this node, over its ipc socket."""
        return self.socket_at(
            f"ipc://{os.path.join(self.run_dir, f'shard-{shard:02d}.sock')}", shard)

    def socket_at(self, endpoint: str, key: int | str | None = None,
                  curve: tuple[str, ServerKeys] | None = None) -> zmq.Socket:
        """`curve`: (the server's public key, ours): connect as a CURVE client."""
        key = (endpoint if key is None else key) if curve is None else f"{endpoint}#{curve[0]}"
        sock = self.sockets.get(key)
        if sock is None:
            sock = self.ctx.socket(zmq.DEALER)
            for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, HWM_MESSAGES),
                                  (zmq.RCVHWM, HWM_MESSAGES)):
                sock.setsockopt(option, value)
            if curve is not None:
                server_public, own = curve
                sock.curve_serverkey = server_public.encode("ascii")
                sock.curve_publickey = own.public
                sock.curve_secretkey = own.secret
            sock.connect(endpoint)
            self.sockets[key] = sock
        return sock

    def receive(self, on_reply: Callable[[bytes], None]) -> None:
        """Hand every reply that has arrived, on any socket, to `on_reply`."""
        for sock in self.sockets.values():
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                for raw in frames:
                    on_reply(raw)

    def list(self) -> list[zmq.Socket]:
        return list(self.sockets.values())

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(0)
        self.sockets.clear()


def decode_answer(raw: bytes) -> tuple[int | None, dict | None, TopicsError | None]:
    """(corr, reply, error) of an answer to a request of the shard's own making."""
    try:
        corr, reply = decode_reply(raw)
        return corr, reply, None
    except TopicsError as failure:
        return getattr(failure, "corr", None), None, failure
