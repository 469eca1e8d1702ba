"""The front's socket shell: a thread of the supervisor that owns the front ROUTER and one
DEALER per shard (its ipc endpoint), and moves bytes for FrontCore.

A thread of its own, so that forwarding never delays the supervisor's control work
(heartbeats, restarts, the stop) and the supervisor's work never delays a reply. The two
share one thing: the shard map, which the supervisor hands over whole (publish_map) and the
relay picks up at its next turn. A request the node answers itself (a reassignment) goes to
`node_call`, whose answer comes back from another thread through `post`, sent at the next
turn.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import zmq

from topics_actors.config import ProcessState
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol import encode_error, encode_reply
from topics_actors.protocol.envelope import requests_of

from .front_core import Effects, FrontCore

log = logging.getLogger(__name__)

POLL_MS = 50                   # how soon a new shard map or a stop is noticed when idle
DRAIN_MAX = 1_000              # requests or replies taken off one socket per turn
SHARD_HWM_MESSAGES = 10_000
# How long a new map waits for the DEALERs of its ready shards to connect before requests
# are read: a shard binds its ipc socket before it reports ready, so this takes well under
# a millisecond, but without it the first request after a start can beat the connection
# and be refused "cannot be reached" by a node that just said it was ready.
CONNECT_WAIT_MS = 500
POSTED_MAX = 1_024             # answers of node calls waiting for the relay's next turn


class FrontRelay:
    def __init__(self, ctx: zmq.Context, front: zmq.Socket, core: FrontCore,
                 identity_of=None, local: zmq.Socket | None = None):
        """`front`: the bound TCP ROUTER, and `local` the ipc one of the node's processes
        (whose requests are not checked), used only by the relay's thread from start() on.
        `identity_of(frame)`: the peer's authenticated identity from a request's last frame
        (CURVE), or None. A peer is tagged with its socket (b"t", b"i") in the core."""
        self.ctx = ctx
        self.front = front
        self.fronts = {b"t": front, **({b"i": local} if local is not None else {})}
        self.core = core
        self.identity_of = identity_of
        self.dealers: dict[int, tuple[str, zmq.Socket]] = {}
        self.dropped_replies = 0
        self._map = None
        self._seen_map = None
        self._ready: set[tuple[int, int]] = set()   # (shard, incarnation) ready in the map
        self._poller = zmq.Poller()
        for sock in self.fronts.values():
            self._poller.register(sock, zmq.POLLIN)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="front-relay", daemon=True)
        self.node_call = _not_in_a_cluster       # (msg, answer(body, error)): the node's own
        self._posted: collections.deque = collections.deque(maxlen=POSTED_MAX)

    def publish_map(self, shard_map: dict) -> None:
        """From the supervisor's thread: the map the relay answers and routes with next."""
        self._map = shard_map

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # --- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._turn()
        except Exception:      # a bug: log it, let the supervisor's own loop carry on
            log.exception("event=front_relay_failed")
        finally:
            for _, sock in self.dealers.values():
                sock.close(0)
            for sock in self.fronts.values():
                sock.close(0)

    def _turn(self) -> None:
        ready = dict(self._poller.poll(self._timeout_ms()))
        # after the poll: a request that follows a change the supervisor made known (READY
        # to systemd, say) is answered with the map that holds it
        if self._map is not self._seen_map:
            self._seen_map = self._map
            self._apply(self.core.update_map(self._seen_map))
            self._connect()
            self._wait_connected(CONNECT_WAIT_MS)
        for tag, sock in self.fronts.items():
            if sock in ready:
                self._take_requests(tag, sock)
        for _, sock in self.dealers.values():
            if sock in ready:
                self._take_replies(sock)
        while self._posted:
            self._apply(self._posted.popleft())
        self._apply(self.core.expire(time.monotonic_ns()))

    def _timeout_ms(self) -> int:
        deadline_ns = self.core.table.next_deadline_ns()
        if deadline_ns is None:
            return POLL_MS
        return max(0, min(POLL_MS, (deadline_ns - time.monotonic_ns()) // 1_000_000 + 1))

    def _connect(self) -> None:
        """A DEALER per shard ipc endpoint in the map (a restarted shard binds the same
        path, and ZeroMQ reconnects by itself)."""
        for shard, endpoint in self.core.ipc_endpoints().items():
            current = self.dealers.get(shard)
            if current is not None and current[0] == endpoint:
                continue
            if current is not None:
                current[1].close(0)
            sock = self.ctx.socket(zmq.DEALER)
            for option, value in ((zmq.LINGER, 0), (zmq.IMMEDIATE, 1),
                                  (zmq.SNDHWM, SHARD_HWM_MESSAGES),
                                  (zmq.RCVHWM, SHARD_HWM_MESSAGES)):
                sock.setsockopt(option, value)
            sock.connect(endpoint)
            self.dealers[shard] = (endpoint, sock)
        self._poller = zmq.Poller()
        for sock in [*self.fronts.values(), *(s for _, s in self.dealers.values())]:
            self._poller.register(sock, zmq.POLLIN)

    def _wait_connected(self, timeout_ms: int) -> None:
        """Wait, within `timeout_ms` in all, until the DEALER of every shard that became
        ready since the last map (a start, a restart: a new incarnation) can send (with
        IMMEDIATE: is connected). The supervisor publishes a map every turn, so a shard
        ready for a while is not waited for again: one that dropped out meanwhile must not
        stall the front at each map. One that cannot send by then is left to ZeroMQ's
        reconnects, and its requests are refused as before."""
        ready = {(s["shard"], s["incarnation"]) for s in self.core.shard_map["shards"]
                 if s["state"] == ProcessState.READY}
        new, self._ready = ready - self._ready, ready
        deadline = time.monotonic() + timeout_ms / 1000
        for shard, _ in sorted(new):
            endpoint, sock = self.dealers.get(shard, ("", None))
            left_ms = (deadline - time.monotonic()) * 1000
            if sock is not None and not sock.poll(max(0, left_ms), zmq.POLLOUT):
                log.warning("event=shard_not_connected shard=%d endpoint=%s", shard, endpoint)

    def _take_requests(self, tag: bytes, sock: zmq.Socket) -> None:
        trusted = tag == b"i"
        checked = self.identity_of is not None and not trusted
        for _ in range(DRAIN_MAX):
            try:   # frames as objects only where their User-Id is needed: bytes are cheaper
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=not checked)
            except zmq.Again:
                return
            if checked:   # every non-empty frame after the identity is one request
                identity, peer = self.identity_of(frames[-1]), frames[0].bytes
                raws = requests_of([frame.bytes for frame in frames])
            else:
                identity, peer, raws = None, frames[0], requests_of(frames)
            for raw in raws:
                self._apply(self.core.request(tag + peer, raw, time.monotonic_ns(),
                                              identity, trusted))

    def _take_replies(self, sock: zmq.Socket) -> None:
        for _ in range(DRAIN_MAX):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            for raw in frames:
                self._apply(self.core.shard_reply(raw))

    def _apply(self, effects: Effects) -> None:
        for shard, raw in effects.sends:
            dealer = self.dealers.get(shard)
            try:
                if dealer is None:
                    raise zmq.Again()
                dealer[1].send(raw, zmq.NOBLOCK)
            except zmq.Again:    # not connected (IMMEDIATE) or full: answer now, not later
                self._apply(self.core.unsent(raw))
        for peer, corr, msg in effects.node_calls:
            self.node_call(msg, self._answer_to(peer, corr))
        for peer, raw in effects.replies:
            try:
                self.fronts[peer[:1]].send_multipart([peer[1:], raw], zmq.NOBLOCK)
            except zmq.ZMQError:  # the client is gone or not reading: it will retry
                self.dropped_replies += 1

    def _answer_to(self, peer: bytes, corr: int):
        """The answer callback of a node call: posted from any thread, sent by this one."""
        def answer(body: dict | None, error: TopicsError | None = None) -> None:
            raw = encode_error(corr, error) if error is not None else encode_reply(corr, body)
            self._posted.append(Effects(replies=[(peer, raw)]))
        return answer


def _not_in_a_cluster(msg, answer) -> None:
    answer(None, TopicsError("this node is not in a cluster (TOPICS_ZK is unset)",
                             ErrorCode.NOT_FOUND))
