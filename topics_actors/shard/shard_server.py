"""The shard's socket shell: a single-threaded loop around ShardCore.

One turn: wait for requests, drain what is queued, widen the batch briefly when fsync-class
writers are arriving together (0.5 ms quiet slices, at most 10 ms), commit once, send the
replies coalesced per peer. ZeroMQ's I/O thread keeps queueing requests while the loop sits
in fdatasync, so the next turn's batch shares the next fsync.
"""

from __future__ import annotations

import logging
import time

import zmq

from topics_actors.errors import ErrorCode, ProtocolError, TopicsError
from topics_actors.limits import INBOX_REQUESTS_MAX, MESSAGE_BYTES_MAX
from topics_actors.protocol import decode, encode_error
from topics_actors.protocol import messages  # noqa: F401  (registers the request kinds)
from topics_actors.shard.dead_letter_sender import DeadLetterSender
from topics_actors.shard.shard_core import ShardCore
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

GROUP_SLICE_MS = 0.5
GROUP_WINDOW_MAX_MS = 10.0
IDLE_POLL_MS = 100
HWM_MESSAGES = 100_000


class ShardServer:
    def __init__(self, core: ShardCore, ctx: zmq.Context, link: SupervisorLink | None,
                 host: str = "127.0.0.1", port: int = 0, ipc_path: str | None = None):
        self.core = core
        self.ctx = ctx
        self.link = link
        self.sock = ctx.socket(zmq.ROUTER)
        for option, value in ((zmq.LINGER, 0), (zmq.RCVHWM, HWM_MESSAGES),
                              (zmq.SNDHWM, HWM_MESSAGES), (zmq.ROUTER_MANDATORY, 1),
                              (zmq.MAXMSGSIZE, MESSAGE_BYTES_MAX)):
            self.sock.setsockopt(option, value)
        self.endpoint = self._bind_tcp(host, port)
        self.ipc = ""
        if ipc_path:
            self.ipc = f"ipc://{ipc_path}"
            self.sock.bind(self.ipc)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.dead_letters = None   # moves of queue jobs to other shards (needs the ipc dir)
        if ipc_path and core.queues is not None:
            self.dead_letters = DeadLetterSender(core.queues.moves, ctx, ipc_path,
                                                 core.options.shard_count, self._submit_local)
        self.stopping = False
        self.dropped_replies = 0

    def _bind_tcp(self, host: str, port: int) -> str:
        try:
            self.sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError:
            if port == 0:
                raise
            log.warning("event=port_taken shard=%d port=%d", self.core.options.shard, port)
            self.sock.bind(f"tcp://{host}:0")
        return self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    # --- lifecycle --------------------------------------------------------------------------

    def serve(self) -> None:
        shard = self.core.options.shard
        if self.link:
            self.link.hello(self.endpoint, self.ipc)
        t0 = time.monotonic()
        for progress in self.core.replay().run():
            self.core.replay_progress = progress
            self._answer_not_ready()
            self._beat("replaying")
            if self.stopping:
                break
        if self.stopping:   # never serve, not even briefly, after a stop during replay
            log.info("event=stopped_during_replay shard=%d", shard)
            self.core.close()
            self.sock.close(0)
            return
        self.core.ready, self.core.replay_progress = True, 1.0
        log.info("event=ready shard=%d topics=%d replay_s=%.3f endpoint=%s", shard,
                 len(self.core.registry), time.monotonic() - t0, self.endpoint)
        self._beat("ready", force=True)
        while not self.stopping:
            self.turn()
        self._shutdown()

    def _beat(self, state: str | None = None, force: bool = False) -> None:
        if self.link:
            self.link.beat(state, self.core.replay_progress, force)
            if not self.link.parent_alive():
                log.warning("event=parent_gone shard=%d", self.core.options.shard)
                self.stopping = True

    def _shutdown(self) -> None:
        self._beat("stopping", force=True)
        self._drain(INBOX_REQUESTS_MAX)
        self._send(self.core.commit())
        self._send(self.core.release_polls())
        self.core.close()
        if self.dead_letters is not None:
            self.dead_letters.close()
        self.sock.close(0)
        log.info("event=stopped shard=%d", self.core.options.shard)

    # --- one turn ---------------------------------------------------------------------------

    def _timeout_ms(self) -> float:
        timeout = IDLE_POLL_MS
        flush_ms = self.core.ms_until_flush()
        if flush_ms is not None:
            timeout = min(timeout, flush_ms)
        if self.link:
            timeout = min(timeout, self.link.ms_until_beat())
        poll_ms = self.core.polls.ms_until_next(time.monotonic_ns())
        claims_ms = self.core.ms_until_claims()
        if claims_ms is not None:
            timeout = min(timeout, claims_ms)
        return timeout if poll_ms is None else min(timeout, poll_ms)

    def turn(self) -> None:
        if self.poller.poll(self._timeout_ms()):
            self._drain(2 * INBOX_REQUESTS_MAX)
            if self.core.wants_group_window():
                self._group_window()
        if self.dead_letters is not None:
            self.dead_letters.pump()
        self.core.submit_due_claims()
        if self.core.has_work():
            self._send(self.core.commit())
        if self.core.polls.count:
            self._send(self.core.expire_polls())
        self.core.flush_due()
        self._beat()

    def _group_window(self) -> None:
        deadline = time.perf_counter() + GROUP_WINDOW_MAX_MS / 1000
        while time.perf_counter() < deadline:
            if not self.poller.poll(GROUP_SLICE_MS) or not self._drain(2 * INBOX_REQUESTS_MAX):
                return

    def _recv(self):
        try:
            frames = self.sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        return frames[0], frames[-1], time.perf_counter_ns()

    def _drain(self, limit: int) -> int:
        count = 0
        while count < limit:
            item = self._recv()
            if item is None:
                break
            count += 1
            peer, raw, t0 = item
            try:
                corr, msg = decode(raw)
            except ProtocolError as error:
                self.core.submit_error(peer, getattr(error, "corr", 0), error, t0)
                continue
            self.core.submit(peer, corr, msg, t0)
        return count

    def _submit_local(self, msg) -> None:
        """A request of the shard's own making (its reply, to no peer, is dropped)."""
        self.core.submit(b"", 0, msg, time.perf_counter_ns())

    def _answer_not_ready(self) -> None:
        error = TopicsError("shard is replaying its WAL", ErrorCode.NOT_READY,
                            {"replay_progress": self.core.replay_progress,
                             "shard": self.core.options.shard})
        replies = []
        while (item := self._recv()) is not None:
            peer, raw, _ = item
            try:
                corr = decode(raw)[0]
            except ProtocolError as bad:
                corr = getattr(bad, "corr", 0)
            replies.append((peer, encode_error(corr, error)))
        self._send(replies)

    def _send(self, replies: list[tuple[bytes, bytes]]) -> None:
        by_peer: dict[bytes, list[bytes]] = {}
        for peer, raw in replies:
            if peer:   # b"": a request of the shard's own making
                by_peer.setdefault(peer, []).append(raw)
        for peer, raws in by_peer.items():
            try:
                self.sock.send_multipart([peer, *raws], zmq.NOBLOCK)
            except zmq.ZMQError:   # the peer is gone or not reading: it will retry
                self.dropped_replies += len(raws)
