"""DEALER sockets from a shard to the ipc sockets of the node's shards (itself included),
opened on first use: the shell's way to send requests of its own making to another shard
(dead-letter moves, router feeds). Sends and receives never block; high-water marks bound
what waits in either direction.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import zmq

HWM_MESSAGES = 1_000


class PeerSockets:
    def __init__(self, ctx: zmq.Context, own_ipc_path: str):
        self.ctx = ctx
        self.run_dir = os.path.dirname(own_ipc_path)
        self.sockets: dict[int, zmq.Socket] = {}

    def socket(self, shard: int) -> zmq.Socket:
        sock = self.sockets.get(shard)
        if sock is None:
            sock = self.ctx.socket(zmq.DEALER)
            for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, HWM_MESSAGES),
                                  (zmq.RCVHWM, HWM_MESSAGES)):
                sock.setsockopt(option, value)
            sock.connect(f"ipc://{os.path.join(self.run_dir, f'shard-{shard:02d}.sock')}")
            self.sockets[shard] = sock
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

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(0)
        self.sockets.clear()
