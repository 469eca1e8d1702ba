"""The shard's socket shell: a single-threaded loop around ShardCore.

One turn: wait for requests, drain what is queued, widen the batch briefly when fsync-class
writers are arriving together (the adaptive window of commit_window.py), commit once, send the
replies coalesced per peer. ZeroMQ's I/O thread keeps queueing requests while the loop sits
in fdatasync, so the next turn's batch shares the next fsync.
"""

from __future__ import annotations

import logging
import math
import os
import time

import zmq

from topics_actors.allocator_policy import release_free_memory
from topics_actors.config import ProcessState
from topics_actors.curve_auth import CurveAuth
from topics_actors.limits import INBOX_REQUESTS_MAX, MESSAGE_BYTES_MAX
from topics_actors.protocol.head_table import heads_path
from topics_actors.protocol.lane import lane_path
from topics_actors.protocol import messages  # noqa: F401  (registers the request kinds)
from topics_actors.protocol.control import IsrChange, PlaceTopic, TopicChange, ReplicaRoles
from topics_actors.shard import diff_read
from topics_actors.shard.commit_publisher import CommitPublisher
from topics_actors.shard.lane_listener import LANE_TAG, LaneListener
from topics_actors.shard.queues.dead_letter_sender import DeadLetterSender
from topics_actors.shard.replication.replica_fetcher import ReplicaFetcher
from topics_actors.shard.routers.router_feed import RouterFeed
from topics_actors.shard.request_intake import IPC, OWN, TCP, RequestIntake
from topics_actors.shard.shard_core import ShardCore
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

IDLE_POLL_MS = 100
AUDIT_SLICE_MS = 5.0         # segment checking per idle turn (quarantine_book.py)
HWM_MESSAGES = 100_000
# A message over MESSAGE_BYTES_MAX is answered invalid_request (protocol/envelope.py); only
# beyond this guard does ZeroMQ drop the connection instead, to bound the memory one peer
# can make the shard hold.
SOCKET_BYTES_MAX = 2 * MESSAGE_BYTES_MAX
CLUSTER_TICK_S = 0.1        # how often ISR changes and placements are sent
# Commits per loop turn while the replies bring work back in-process (a router's copies of
# a source in this shard, a chain of such routers); the rest waits for the next turn.
COMMITS_PER_TURN = 4


def poll_briefly(poller: zmq.Poller, wait_ms: float) -> list:
    """poller.poll() that waits at least `wait_ms` when nothing comes. ZeroMQ counts whole
    milliseconds and truncates, so a 0.3 ms poll would not wait at all: a wait under one
    millisecond sleeps for its length, then looks (an arrival meanwhile waits for the end
    of the sleep: the group-commit window is gathering anyway)."""
    if wait_ms >= 1:
        return poller.poll(math.ceil(wait_ms))
    time.sleep(wait_ms / 1000)
    return poller.poll(0)


class ShardServer:
    """Two ROUTER sockets: TCP for clients anywhere, ipc for processes of the node.

    The ipc socket is the trust boundary for a `prevalidated` append (the gateway's): its
    file is the node user's alone (mode 0600), and a process that can open it could write
    the WAL directly anyway, whereas a TCP peer may be anyone. A node secret would trust
    the same processes at the price of distributing it and checking it per message. The
    core sees every peer as a one-byte socket tag + its identity, so a reply goes back on
    the socket its request came from and two sockets' identities never collide."""

    def __init__(self, core: ShardCore, ctx: zmq.Context, link: SupervisorLink | None,
                 host: str = "127.0.0.1", port: int = 0, ipc_path: str | None = None,
                 curve: CurveAuth | None = None):
        """`curve`: the TCP socket is a CURVE server, and each request on it is checked
        against its client key's scopes and prefixes (client_keys)."""
        self.core = core
        self.ctx = ctx
        self.link = link
        self.curve = curve
        self.sock = self._router()
        if curve is not None:
            curve.serve(self.sock)
        self.endpoint = self._bind_tcp(host, port)
        self.sources = [(self.sock, TCP, False)]
        self.ipc = ""
        if ipc_path:
            local = self._router()
            self.ipc = f"ipc://{ipc_path}"
            local.bind(self.ipc)
            os.chmod(ipc_path, 0o600)   # before this, the umask's mode (022: no one else
                                        # may connect, which needs write permission)
            self.sources.append((local, IPC, True))
        self.dead_letters = None   # moves of queue jobs to other shards (needs the ipc dir)
        self.router_feed = None    # reads of the routers' sources (needs the ipc dir)
        if ipc_path:
            self.dead_letters = DeadLetterSender(core.queues.moves, ctx, ipc_path,
                                                 core.options.shard_count, self._submit_local)

        self.replica_fetcher = None    # a cluster node's fetches from topic leaders
        if core.replicas.enabled:
            self.replica_fetcher = ReplicaFetcher(core.replicas, ctx, self._submit_local,
                                                  curve.keys if curve is not None else None)
        self.by_tag = {tag: sock for sock, tag, _ in self.sources}
        self.poller = zmq.Poller()
        if ipc_path:
            self.router_feed = RouterFeed(core.routers, self.poller, os.path.dirname(ipc_path),
                                          core.options.shard, core.options.shard_count,
                                          self._submit_local, self._submit_own)
        for sock, _, _ in self.sources:
            self.poller.register(sock, zmq.POLLIN)
        if link is not None and core.replicas.enabled:
            self.poller.register(link.sock, zmq.POLLIN)   # replica roles from the supervisor
        # The gateways' lanes (protocol/lane.py): trusted as the ipc socket is.
        self.lanes = LaneListener(lane_path(self.ipc), self.poller) if self.ipc else None
        self.feed = CommitPublisher(self.poller, self.ipc) if self.ipc else None
        if self.ipc:
            core.open_heads(heads_path(self.ipc))
        self.intake = RequestIntake(core, self.sources, self.lanes, self.poller, curve)
        self._cluster_due = 0.0
        self.feed_polled: set = set()
        self.stopping = False
        self.dropped_replies = 0

    def _router(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.ROUTER)
        for option, value in ((zmq.LINGER, 0), (zmq.RCVHWM, HWM_MESSAGES),
                              (zmq.SNDHWM, HWM_MESSAGES), (zmq.ROUTER_MANDATORY, 1),
                              (zmq.MAXMSGSIZE, SOCKET_BYTES_MAX)):
            sock.setsockopt(option, value)
        return sock

    def _bind_tcp(self, host: str, port: int) -> str:
        try:
            self.sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError:
            if port == 0:
                raise
            log.warning("event=port_taken shard=%d port=%d", self.core.options.shard, port)
            self.sock.bind(f"tcp://{host}:0")
        return self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def _close(self) -> None:
        if self.dead_letters is not None:
            self.dead_letters.close()
        if self.router_feed is not None:
            self.router_feed.close()
        if self.replica_fetcher is not None:
            self.replica_fetcher.close()
        for sock, _, _ in self.sources:
            sock.close(0)
        if self.lanes is not None:
            self.lanes.close()
        if self.feed is not None:
            self.feed.close()

    # --- lifecycle --------------------------------------------------------------------------

    def serve(self) -> None:
        shard = self.core.options.shard
        if self.link:
            self.link.hello(self.endpoint, self.ipc)
        t0 = time.monotonic()
        for progress in self.core.replay().run():
            self.core.replay_progress = progress
            self._send(self.intake.refuse_while_replaying())
            self._beat(ProcessState.REPLAYING)
            if self.stopping:
                break
        if self.stopping:   # never serve, not even briefly, after a stop during replay
            log.info("event=stopped_during_replay shard=%d", shard)
            self.core.close()
            self._close()
            return
        self.core.ready, self.core.replay_progress = True, 1.0
        log.info("event=ready shard=%d topics=%d replay_s=%.3f endpoint=%s", shard,
                 len(self.core.registry), time.monotonic() - t0, self.endpoint)
        self._beat(ProcessState.READY, force=True)
        while not self.stopping:
            self.turn()
        self._shutdown()

    def _beat(self, state: ProcessState | None = None, force: bool = False) -> None:
        if self.link:
            self.link.beat(state, self.core.replay_progress, force,
                           sorted(self.core.quarantine.topics), self.core.unsettled())
            if not self.link.parent_alive():
                log.warning("event=parent_gone shard=%d", self.core.options.shard)
                self.stopping = True

    def _shutdown(self) -> None:
        self._beat(ProcessState.STOPPING, force=True)
        self.intake.drain(INBOX_REQUESTS_MAX, self.poller.poll(0))
        self._send(self.core.commit())
        self._send(self.core.release_polls())
        self._publish()
        self.core.close()
        self._close()
        log.info("event=stopped shard=%d", self.core.options.shard)

    # --- one turn ---------------------------------------------------------------------------

    def _timeout_ms(self) -> float:
        if self.core.has_work():
            return 0         # staged by the last turn's replies, beyond COMMITS_PER_TURN
        timeout = 0 if self.core.quarantine.unaudited else IDLE_POLL_MS
        flush_ms = self.core.ms_until_flush()
        if flush_ms is not None:
            timeout = min(timeout, flush_ms)
        if self.link:
            timeout = min(timeout, self.link.ms_until_beat())
        poll_ms = self.core.polls.ms_until_next(time.monotonic_ns())
        claims_ms = self.core.ms_until_claims()
        if claims_ms is not None:
            timeout = min(timeout, claims_ms)
        for feed in (self.router_feed, self.replica_fetcher):
            feed_ms = feed.ms_until_due() if feed is not None else None
            if feed_ms is not None:
                timeout = min(timeout, feed_ms)
        return timeout if poll_ms is None else min(timeout, poll_ms)

    def turn(self) -> None:
        # ZeroMQ counts whole milliseconds and truncates: 0.7 would not wait at all, and
        # the turn would spin until a timer under a millisecond away is due
        ready = self.poller.poll(math.ceil(self._timeout_ms()))
        if ready:
            self._take(ready)
            self._send_released()
            if self.core.wants_group_window():
                self._group_window()
        if self.dead_letters is not None:
            self.dead_letters.pump()
        if self.router_feed is not None:
            self.router_feed.pump(ready)
        if self.replica_fetcher is not None:
            self._cluster_turn()
        self.core.submit_due_claims()
        if self.core.has_work():
            self._commit()
        if self.core.polls.count:
            self._send(self.core.expire_polls())
        self.core.flush_due()
        if self.core.reader.segments.sweep_idle(time.monotonic_ns()):
            release_free_memory()   # every 10 s: what the heap freed, even mid-heap (< 1 ms)
        if self.core.quarantine.unaudited and not self.core.has_work():
            self.core.audit_segments(AUDIT_SLICE_MS)
        self._beat()

    def _commit(self) -> None:
        """Commit the batch and send its replies; then commit what those brought back
        in-process (a router's copies of a source in this shard), up to COMMITS_PER_TURN
        times, so they are visible before the next request is read."""
        for _ in range(COMMITS_PER_TURN):
            self._send(self.core.commit())
            self._publish()
            if self.replica_fetcher is not None:
                # What this commit made durable goes to the leaders now, in the next
                # fetches, rather than after the next poll: an `acks: all` waits on it.
                self.replica_fetcher.pump()
            if not self.core.has_work():
                return

    def _take(self, ready: list) -> int:
        """What a poll found: the feed's subscribers and room for its notes, then requests
        (how many were taken)."""
        if self.feed is not None:
            self.feed.ready(ready)
        return self.intake.drain(2 * INBOX_REQUESTS_MAX, ready)

    def _cluster_turn(self) -> None:
        """Replication's shell work: roles in from the supervisor, fetches out and their
        answers in, and (every CLUSTER_TICK_S) ISR changes and placements to write."""
        for msg in self.link.receive():
            if type(msg) is ReplicaRoles:
                if self.curve is not None:
                    self.curve.peers = frozenset(msg.peer_keys or ())
                self._submit_local(msg)
        self._watch_feed_sockets(self.replica_fetcher.sockets_list())
        self.replica_fetcher.pump()
        now = time.monotonic()
        if now < self._cluster_due:
            return
        self._cluster_due = now + CLUSTER_TICK_S
        replicas = self.core.replicas
        for topic, epoch, version, isr in replicas.leader.isr_proposals():
            self.link.send(IsrChange("shard", self.core.options.shard, os.getpid(), topic,
                                     epoch, version, isr))
        for topic, config, create, asked_ns in replicas.placements.to_place():
            self.link.send(PlaceTopic("shard", self.core.options.shard, os.getpid(), topic,
                                      config, create, asked_ns))
        for topic, change in replicas.placements.changes():
            lead = replicas.replicas.lead(topic)
            if lead is not None:
                self.link.send(TopicChange("shard", self.core.options.shard, os.getpid(),
                                           topic, lead.leader_epoch, **change))

    def _watch_feed_sockets(self, sockets: list) -> None:
        """Let a feed's answer end the poll (its sockets open on first use)."""
        for sock in sockets:
            if sock not in self.feed_polled:
                self.poller.register(sock, zmq.POLLIN)
                self.feed_polled.add(sock)

    def _publish(self) -> None:
        """Tell the gateways' watch streams what the commit woke (after the replies)."""
        if self.core.feed_pending:
            if self.feed is None:
                self.core.feed_pending.clear()
            else:
                self.feed.publish(self.core.feed_pending, self.core.registry, self._read_page)

    def _read_page(self, topic, msg):
        """A feed notification's page: the diff a gateway would read (shard/diff_read.py)."""
        return diff_read.diff(topic, self.core.reader.read, msg, self.core.stager.clock())

    def _group_window(self) -> None:
        """Gather more fsync-class writers for this commit (shard/commit_window.py): until
        the previous commit's writers are back, a quiet slice passes, or the window's
        limit (about one fsync) is reached."""
        window, stats = self.core.window, self.core.stats
        last = time.perf_counter()
        deadline = last + window.limit_ms() / 1000
        quiet_ms = window.quiet_ms()
        stats.windows += 1
        while not self.core.gathered_enough():
            left_ms = (deadline - time.perf_counter()) * 1000
            if left_ms <= 0:
                stats.windows_limit += 1
                return
            ready = poll_briefly(self.poller, min(quiet_ms, left_ms))
            drained = self._take(ready) if ready else 0
            if not drained:
                stats.windows_quiet += 1
                return
            now = time.perf_counter()
            window.arrived((now - last) * 1000, drained)
            last = now
            self._send_released()
        stats.windows_full += 1

    def _send_released(self) -> None:
        """A cluster node's `acks: all` answers that a follower's fetch released: out now."""
        if self.replica_fetcher is not None:
            self._send(self.core.released_replies())

    def _submit_local(self, msg) -> None:
        """A request of the shard's own making (its reply, to no peer, is dropped)."""
        self.core.submit(b"", 0, msg, time.perf_counter_ns())

    def _submit_own(self, msg, corr: int) -> None:
        """A router's read of a source in this shard: answered to the router feed."""
        self.core.submit(OWN, corr, msg, time.perf_counter_ns())

    def _send(self, replies: list[tuple[bytes, bytes]]) -> None:
        by_peer: dict[bytes, list[bytes]] = {}
        for peer, raw in replies:
            if peer:   # b"": a request of the shard's own making
                by_peer.setdefault(peer, []).append(raw)
        for peer, raws in by_peer.items():
            if peer == OWN:
                for raw in raws:
                    self.router_feed.answered(raw)
                continue
            if peer[:1] == LANE_TAG:
                if not self.lanes.send(peer[1:], raws):
                    self.dropped_replies += len(raws)
                continue
            try:
                self.by_tag[peer[:1]].send_multipart([peer[1:], *raws], zmq.NOBLOCK)
            except zmq.ZMQError:   # the peer is gone or not reading: it will retry
                self.dropped_replies += len(raws)
