"""Sending a queue's jobs to dead-letter topics in other shards: the shell's part of
shard/queues/dead_letter_moves.py.

Once per loop turn, and never blocking the loop: replies that came in are turned into
MoveDone requests for the core (a success, or `deduped`), and moves that are due are sent
as Append requests over a DEALER to the owning shard's ipc socket (the sibling of this
shard's own socket in the node's run directory). At most IN_FLIGHT_MAX moves are in flight;
one that gets no answer within TIMEOUT_MS, or an error, is sent again after RETRY_MS (the
Append carries an idempotency key naming the job, so a resend is deduplicated). A move
stays in the core's outbox until it is acknowledged, so nothing here needs to survive a
crash: after a restart the outbox is rebuilt from the logged moving marks.
"""

from __future__ import annotations

import logging
import time

import zmq

from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply, encode
from topics_actors.shard.queues.dead_letter_moves import DeadLetterMoves, Move, MoveDone
from topics_actors.shard.peer_sockets import PeerSockets
from topics_actors.topic_identity import shard_of_name

log = logging.getLogger(__name__)

IN_FLIGHT_MAX = 64
TIMEOUT_MS = 5_000
RETRY_MS = 1_000


class DeadLetterSender:
    def __init__(self, moves: DeadLetterMoves, ctx: zmq.Context, own_ipc_path: str,
                 shard_count: int, submit):
        """`submit(msg)` hands a MoveDone to the core (staged in the current batch)."""
        self.moves = moves
        self.peers = PeerSockets(ctx, own_ipc_path)
        self.shard_count = shard_count
        self.submit = submit
        self.in_flight: dict[int, tuple[Move, float]] = {}    # corr -> (move, sent at)
        self.not_before: dict[Move, float] = {}               # retry times (monotonic s)
        self.corr = 0
        self.sent = self.failed = 0

    def pump(self) -> None:
        """Take the replies that came in, give up on silent requests, send what is due."""
        if not self.in_flight and not self.moves.pending():
            self.not_before.clear()   # every shard turn calls this: nothing to do is cheap
            return
        now = time.monotonic()
        self.peers.receive(lambda raw: self._reply(raw, now))
        for corr, (move, sent_at) in list(self.in_flight.items()):
            if now - sent_at > TIMEOUT_MS / 1000:
                del self.in_flight[corr]
                self.not_before[move] = now + RETRY_MS / 1000
        pending = self.moves.pending()
        if len(self.not_before) > 2 * len(pending) + 64:
            self.not_before = {m: t for m, t in self.not_before.items() if m in pending}
        if not pending:
            return
        busy = {move for move, _ in self.in_flight.values()}
        for move in list(pending):
            if len(self.in_flight) >= IN_FLIGHT_MAX:
                break
            if move not in busy and self.not_before.get(move, 0) <= now:
                self._send(move, now)

    def _send(self, move: Move, now: float) -> None:
        msg = self.moves.move_request(move)
        if msg is None:
            self.not_before.pop(move, None)
            return
        if isinstance(msg, MoveDone):
            self.not_before[move] = now + TIMEOUT_MS / 1000
            self.submit(msg)
            return
        self.corr += 1
        try:
            self.peers.socket(shard_of_name(msg.topic, self.shard_count)).send(
                encode(msg, self.corr), zmq.NOBLOCK)
        except zmq.Again:   # the peer's queue is full: later
            self.not_before[move] = now + RETRY_MS / 1000
            return
        self.in_flight[self.corr] = (move, now)
        self.sent += 1

    def _reply(self, raw: bytes, now: float) -> None:
        try:
            corr, error = decode_reply(raw)[0], None
        except TopicsError as failure:   # an error reply, or an undecodable one (no corr)
            corr, error = getattr(failure, "corr", None), failure
        entry = self.in_flight.pop(corr, None)
        if entry is None:
            return   # answered after its timeout: the resend decides
        move = entry[0]
        if error is not None:
            self.failed += 1
            self.not_before[move] = now + RETRY_MS / 1000
            log.warning("event=dead_letter_refused topic=%s seq=%d code=%s", move[0],
                        move[1], error.code.wire)
            return
        # The core deletes the job in this turn's commit; should that batch fail, the move
        # is still pending and goes out again after the timeout.
        self.not_before[move] = now + TIMEOUT_MS / 1000
        self.submit(MoveDone(*move))

    def close(self) -> None:
        self.peers.close()
