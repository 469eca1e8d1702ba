"""A follower shard's fetches from the leaders of its topics: the shell's part of
shard/replication/replica_book.py.

Once per loop turn, never blocking: answers that came in become ReplicaAnswer requests for
the core, and each followed topic with nothing in flight gets its next request (an epoch
query until the logs are reconciled, then a long-polling fetch from its durable log end),
sent over a DEALER to the leader's shard for that topic (one socket per leader shard, so
the requests of many topics share one connection). A request with no answer within
FETCH_TIMEOUT_MS is forgotten and asked again; a late answer is dropped by the core's
checks (leader epoch, start seq). Errors back off RETRY_MS. A request still in flight to
a leader that no longer leads (a new leader or epoch arrived) is forgotten at once, and the
new leader asked: a dead leader's silence does not hold up the failover.
"""

from __future__ import annotations

import logging
import time

import zmq

from topics_actors.protocol import encode
from topics_actors.server_keys import ServerKeys
from topics_actors.shard.peer_sockets import PeerSockets, decode_answer
from topics_actors.shard.replication.follower_duties import FETCH_WAIT_MS
from topics_actors.shard.replication.replica_book import ReplicaAnswer, ReplicaBook

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 3_000      # beyond the leader's park: the leader is gone or stuck
RETRY_MS = 200
HWM_MESSAGES = 1_000


class ReplicaFetcher:
    def __init__(self, book: ReplicaBook, ctx: zmq.Context, submit,
                 keys: ServerKeys | None = None):
        """`submit(msg)` hands a ReplicaAnswer to the core (staged in the current batch);
        `keys`: this node's CURVE key pair, when it serves CURVE (so do the others)."""
        self.book = book
        self.keys = keys
        self.ctx = ctx
        self.submit = submit
        self.peers = PeerSockets(ctx)
        self.in_flight: dict[int, tuple[str, str, float]] = {}   # corr -> topic, kind, sent
        self.busy: dict[str, tuple[int, str, int]] = {}   # topic -> corr, endpoint, epoch
        self.not_before: dict[str, float] = {}
        self.corr = 0
        self.sent = self.failed = 0

    def pump(self) -> None:
        if not self.book.replicas.follows_any() and not self.in_flight:
            return
        now = time.monotonic()
        for corr, (name, _kind, sent_at) in list(self.in_flight.items()):
            if now - sent_at > (FETCH_WAIT_MS + FETCH_TIMEOUT_MS) / 1000:
                del self.in_flight[corr]
                self.busy.pop(name, None)
        self._receive(now)
        for name, endpoint, msg in self.book.follower.requests():
            asked = self.busy.get(name)
            if asked is not None and asked[1:] != (endpoint, msg.leader_epoch):
                self.in_flight.pop(asked[0], None)      # asked of the old leader
                del self.busy[name]
                self.not_before.pop(name, None)
                asked = None
            if asked is not None or self.not_before.get(name, 0) > now:
                continue
            self._send(name, endpoint, msg, now)

    def ms_until_due(self) -> float | None:
        if not self.book.replicas.follows_any():
            return None
        now = time.monotonic()
        waits = [max(0.0, (self.not_before.get(n, 0) - now) * 1000)
                 for n in self.book.replicas.following() if n not in self.busy]
        return min(waits) if waits else None

    def _send(self, name: str, endpoint: str, msg, now: float) -> None:
        self.corr += 1
        try:
            self.peers.socket_at(endpoint, curve=self._curve(name)).send(
                encode(msg, self.corr), zmq.NOBLOCK)
        except zmq.Again:
            self.not_before[name] = now + RETRY_MS / 1000
            return
        self.in_flight[self.corr] = (name, msg.KIND, now)
        self.busy[name] = (self.corr, endpoint, msg.leader_epoch)
        self.sent += 1

    def _curve(self, name: str) -> tuple[str, ServerKeys] | None:
        role = self.book.role(name)
        if self.keys is None or role is None or not role.leader_curve:
            return None
        return role.leader_curve, self.keys

    def _receive(self, now: float) -> None:
        self.peers.receive(lambda raw: self._reply(raw, now))

    def _reply(self, raw: bytes, now: float) -> None:
        corr, reply, error = decode_answer(raw)
        entry = self.in_flight.pop(corr, None)
        if entry is None:
            return                          # answered after its timeout
        name, kind, _sent_at = entry
        self.busy.pop(name, None)
        if error is not None:
            self.failed += 1
            self.not_before[name] = now + RETRY_MS / 1000
            if (error.detail or {}).get("reason") == "seq_out_of_range":
                self.book.follower.leader_behind(name)
            log.debug("event=replica_fetch_failed topic=%s code=%s", name, error.code.wire)
            return
        self.submit(ReplicaAnswer(name, kind, reply))

    def sockets_list(self) -> list[zmq.Socket]:
        return self.peers.list()

    def close(self) -> None:
        self.peers.close()
