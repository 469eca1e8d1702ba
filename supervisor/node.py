"""The supervisor process of one node.

It holds the data-dir lock, fixes the WAL layout, spawns one process per shard, and then
loops: answer the front endpoint (shard map, readiness), take children's hellos and
heartbeats, restart the dead with backoff, kill the silent, tell systemd how it goes
(service_notify), and on SIGTERM stop everyone in order within one budget (SIGTERM, what is
left of TOPICS_STOP_GRACE_MS, SIGKILL). Every state change is one log line and one PUB event.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import zmq

from topics_actors.config import (
    NodeConfig, NodeWiring, ProcessRole, ProcessState, compactor_options, encode_options,
    gateway_options, reclaimer_options, shard_process_options,
)
from topics_actors.errors import CannotListen, ProtocolError, TopicsError
from topics_actors.gateway import request_stats
from topics_actors.protocol import decode, encode
from topics_actors.protocol.control import (
    Heartbeat, Hello, IsrChange, PlaceTopic, TopicChange, ReplicaRoles,
)
from topics_actors.protocol.envelope import encode_event
from topics_actors.shard import byte_quota
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout
from .cluster_member import ClusterMember, join_cluster
from .data_lock import DataDirLock
from .fork_server import ForkServer
from .node_sockets import NodeSockets, write_port_file
from .process_table import Child, ProcessTable, python_module_argv
from .restart_policy import RestartPolicy
from .service_notify import ServiceNotifier

log = logging.getLogger(__name__)

POLL_MS = 100
ROLES_RESEND_S = 2.0        # replica roles go to every shard at least this often
EXIT_CHILD_FLAPPING = 3     # a child failed to start too often (restart_policy); see OPERATIONS
SHARD_STOP_SHARE = 0.25     # of the stop budget, kept for the shards' last commits and fsync


class Supervisor:
    def __init__(self, config: NodeConfig):
        self.config = config
        self.stopping = False
        self.exit_code = 0
        self.table = ProcessTable(self._state_changed)
        self.lock = DataDirLock(config.data_dir)
        self.net = NodeSockets(config)
        self.wiring: NodeWiring | None = None
        self.cluster: ClusterMember | None = None    # with TOPICS_ZK only
        self.started_ms = time.time_ns() // 1_000_000
        self.notifier = ServiceNotifier()      # takes NOTIFY_SOCKET out of the environment
        self.forks: ForkServer | None = None    # where the children are forked from

    # --- start-up ---------------------------------------------------------------------------

    def _child(self, role: ProcessRole, index: int, module: str, options_for,
               **spawn) -> None:
        """Add a child whose argv is `python -m module --options <options_for(port)>`."""
        def argv_for(port: int) -> list[str]:
            return python_module_argv(module, "--options", encode_options(options_for(port)))
        policy = RestartPolicy(max_restarts=self.config.restart_max,
                               window_ms=self.config.restart_window_ms)
        self.table.add(Child(role, index, argv_for, policy, **spawn))

    def _add_children(self) -> None:
        cfg, wiring = self.config, self.wiring
        for index in range(cfg.wal_shards):
            self._child(ProcessRole.SHARD, index, "topics_actors.shard",
                        lambda port, index=index: shard_process_options(cfg, wiring, index,
                                                                        port))
        self._child(ProcessRole.COMPACTOR, 0, "topics_actors.compactor",
                    lambda _port: compactor_options(cfg, wiring))
        self._child(ProcessRole.RECLAIMER, 0, "topics_actors.reclaimer",
                    lambda _port: reclaimer_options(cfg, wiring))
        fd = self.net.http_sock.fileno() if self.net.http_sock is not None else -1
        for index in range(cfg.gateway_workers):
            self._child(ProcessRole.GATEWAY, index, "topics_actors.gateway",
                        lambda _port, index=index: gateway_options(cfg, wiring, index, fd),
                        pass_fds=(fd,))

    def run(self) -> int:
        cfg = self.config
        cfg.validate()
        refusal = self.net.check_bind()
        if refusal:
            log.error("event=start_refused reason=%r", refusal)
            return 2
        os.makedirs(cfg.data_dir, exist_ok=True)
        try:
            self.lock.acquire(wait_ms=cfg.stop_grace_ms)   # a dead supervisor's children
        except TopicsError as error:
            log.error("event=start_refused reason=%r", error.message)
            return 2
        try:
            if cfg.fork_server:    # here: the data dir is ours, and no thread runs yet
                self.forks = ForkServer()
                self.table.fork_server = self.forks if self.forks.start() else None
            self.table.inherited_fds = (self.lock.fd,)
            generation = prepare_layout(RealFs(), cfg.data_dir, cfg.wal_shards)
            try:
                self.wiring = self.net.bind(self.started_ms)
            except CannotListen as error:
                log.error("event=start_refused reason=%r", error.message)
                return 2
            log.info("event=listening zmq=tcp://%s:%d http_port=%d shards=%d data_dir=%s "
                     "layout_generation=%d", cfg.host, self.net.zmq_port, self.net.http_port,
                     cfg.wal_shards, cfg.data_dir, generation)
            if cfg.zk and not self._join_cluster():
                return 2
            if cfg.port_file:
                write_port_file(cfg.port_file, {"http": self.net.http_port,
                                                 "zmq": self.net.zmq_port})
            if cfg.max_total_bytes:
                byte_quota.create_file(self.wiring.quota_file)
            if cfg.gateway_workers:
                request_stats.create_file(self.wiring.requests_file, cfg.gateway_workers)
            self._add_children()
            for child in self.table.children:
                self.table.spawn(child)
            if self.cluster is not None:
                self.net.relay.node_call = self.cluster.admin
            self.net.start_relay(self.shard_map())
            self._install_signal_handlers()
            while not self.stopping:
                self._turn()
            self._stop_children()
            return self.exit_code
        finally:
            self._close()

    def _join_cluster(self) -> bool:
        """Open the node's ZooKeeper session and register; False (logged) if it cannot."""
        cfg, net = self.config, self.net
        info = {"advertise": cfg.advertised_host(), "http_port": net.http_port,
                "zmq_port": net.zmq_port, "quarantined": [], "unsettled": {}}
        if net.curve is not None:     # other nodes' shards fetch from ours under this key
            info["curve_public"] = net.curve.keys.public.decode("ascii")
        self.cluster = join_cluster(cfg.zk, cfg.zk_session_timeout_ms, cfg.node_id, info)
        return self.cluster is not None

    def _install_signal_handlers(self) -> None:
        def stop(signum, _frame):
            if not self.stopping:
                log.info("event=stopping signal=%s", signal.Signals(signum).name)
            self.stopping = True
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def _close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        self.net.close()
        if self.forks is not None:
            self.forks.close()
        self.notifier.close()
        self.lock.release()
        log.info("event=stopped")

    # --- the loop ---------------------------------------------------------------------------

    def _turn(self) -> None:
        self._answer(POLL_MS)
        self._supervise()
        if self.cluster is not None:
            self._share_roles()
        self.net.relay.publish_map(self.shard_map())
        if not self.net.relay.alive():     # a bug in the relay (logged there): no front, no node
            log.error("event=front_relay_gone action=stopping_node")
            self.exit_code = 1
            self.stopping = True
        if self.cluster is not None and not self.cluster.alive():   # a bug, logged there
            log.error("event=cluster_member_gone action=stopping_node")
            self.exit_code = 1
            self.stopping = True
        if not self.stopping:
            self.notifier.report(*self.progress())

    def _share_roles(self) -> None:
        """Send each ready shard the replicated topics' states when they change (and every
        ROLES_RESEND_S, so a lost message costs a delay, not a stranded topic); register the
        shards' endpoints once all are known."""
        shards = [c for c in self.table.children if c.role == ProcessRole.SHARD]
        if all(c.port for c in shards):
            host = self.config.advertised_host()
            self.cluster.set_shards([f"tcp://{host}:{c.port}" for c in shards])
        self.cluster.set_quarantined(sorted({t for c in shards for t in c.quarantined}))
        self.cluster.set_unsettled({t: e for c in shards if c.incarnation == 1
                                    for t, e in c.unsettled.items()})   # see _restarted
        serial, roles, fenced, refused, absent = self.cluster.roles()
        if self.net.curve is not None:
            self.net.curve.peers = frozenset(self.cluster.peer_keys())
        raw, now = None, time.monotonic()
        for child in shards:
            sent_serial, sent_at = child.roles_sent
            if child.state != ProcessState.READY or not child.peer or (
                    sent_serial == serial and now - sent_at < ROLES_RESEND_S):
                continue
            try:
                raw = raw or encode(ReplicaRoles(roles, True, fenced, refused,
                                                 self.cluster.peer_keys(), absent,
                                                 _restarted(shards)), 0)
                self.net.control.send_multipart([child.peer, raw], zmq.NOBLOCK)
                child.roles_sent = (serial, now)
            except zmq.ZMQError:
                pass             # the shard is gone or full: the next turn tries again

    def progress(self) -> tuple[str, bool]:
        """(the STATUS line, whether the node is ready): every shard ready and every gateway
        serving, which is when GET /v0/ready answers 200."""
        shards = [c for c in self.table.children if c.role == ProcessRole.SHARD]
        gateways = [c for c in self.table.children if c.role == ProcessRole.GATEWAY]
        ready = sum(c.state == ProcessState.READY for c in shards)
        if ready < len(shards):
            return (f"replaying: shards {ready}/{len(shards)} ready, "
                    f"{_replay_progress(shards):.0%} replayed", False)
        serving = sum(c.state == ProcessState.READY for c in gateways)
        if serving < len(gateways):
            return f"starting: gateways {serving}/{len(gateways)} serving", False
        return (f"ready: shards {ready}/{len(shards)}, gateways {serving}/{len(gateways)}, "
                f"http {self.config.host}:{self.net.http_port}, zmq port {self.net.zmq_port}", True)

    def _answer(self, timeout_ms: int) -> None:
        self.notifier.keep_alive()         # WATCHDOG=1: this loop still turns
        poller = zmq.Poller()
        poller.register(self.net.control, zmq.POLLIN)
        ready = dict(poller.poll(timeout_ms))
        if self.net.control in ready:
            self._drain(self.net.control, self._on_control)

    def _stop_children(self) -> None:
        """Stop in order within one budget, TOPICS_STOP_GRACE_MS (docs/OPERATIONS.md 5): the
        gateways (no new HTTP work, requests in flight end), then the compactor (its final
        checkpoint), each until what is left of the budget less the shards' share, then the
        shards and the reclaimer until the budget's end. A child still running at the end of
        its phase is killed, so the whole stop takes the budget at most."""
        grace_s = self.config.stop_grace_ms / 1000
        end_s = time.monotonic() + grace_s
        early_end_s = end_s - grace_s * SHARD_STOP_SHARE
        self.notifier.stopping("stopping: gateways")
        self._stop_answering(ProcessRole.GATEWAY, early_end_s)
        self.notifier.send("STATUS=stopping: compactor (final checkpoint)")
        self._stop_answering(ProcessRole.COMPACTOR, early_end_s)
        self.notifier.send("STATUS=stopping: shards")
        self.table.stop_all(max(0, round((end_s - time.monotonic()) * 1000)))

    def _stop_answering(self, role: ProcessRole, deadline_s: float) -> None:
        """Stop the children of `role` by `deadline_s` (monotonic), still answering the front
        while they finish: the gateways' last requests and the compactor's final checkpoint
        need the shard map."""
        children = [c for c in self.table.children if c.role == role]
        self.table.signal_stop(children)
        while (time.monotonic() < deadline_s
               and any(c.proc is not None and c.proc.poll() is None for c in children)):
            self._answer(POLL_MS)
            self.net.relay.publish_map(self.shard_map())
        self.table.stop_all(0, roles=(role,))

    def _drain(self, sock: zmq.Socket, handler) -> None:
        for _ in range(1000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            handler(frames[0], frames[-1])

    def _on_control(self, peer: bytes, raw: bytes) -> None:
        try:
            _, msg = decode(raw)
        except ProtocolError as error:
            log.warning("event=bad_control_message error=%r", error.message)
            return
        child = next((c for c in self.table.children
                      if c.role == getattr(msg, "role", None) and c.index == msg.index
                      and c.pid == msg.pid), None)
        if child is None:
            return   # a message from a process we did not spawn (or an old incarnation)
        child.last_beat_ns = self.table.clock_ns()
        if isinstance(msg, Hello):
            child.endpoint, child.ipc = msg.endpoint, msg.ipc
            child.port = int(msg.endpoint.rsplit(":", 1)[1]) if msg.endpoint else 0
            child.peer, child.roles_sent = peer, (0, 0.0)
        elif isinstance(msg, (IsrChange, PlaceTopic, TopicChange)):
            if self.cluster is not None:
                self.cluster.submit(msg)
        elif isinstance(msg, Heartbeat):
            child.progress = msg.replay_progress
            child.quarantined = tuple(msg.quarantined or ())
            child.unsettled = dict(msg.unsettled or {})
            if child.state != ProcessState.STOPPING:   # once told to stop, only its exit counts
                self.table.set_state(child, msg.state, pid=child.pid)

    def shard_map(self) -> dict:
        shards = [c for c in self.table.children if c.role == ProcessRole.SHARD]
        return {"node_ready": all(c.state == ProcessState.READY for c in shards),
                "replay_progress": _replay_progress(shards),
                "shard_count": len(shards), "shards": [c.describe() for c in shards],
                "processes": [{"role": c.role, "index": c.index, "state": c.state,
                               "pid": c.pid, "incarnation": c.incarnation}
                              for c in self.table.children if c.role != ProcessRole.SHARD],
                "pid": os.getpid(), "zmq_port": self.net.zmq_port, "http_port": self.net.http_port,
                **({"cluster": self.cluster.view()} if self.cluster is not None else {})}

    def _supervise(self) -> None:
        for child, code in self.table.reap():
            if not self.table.schedule_restart(child, code):
                self._give_up(child, code)
        if self.stopping:
            return
        for child in self.table.silent(self.config.heartbeat_timeout_ms):
            self.table.kill(child, f"no heartbeat for {self.config.heartbeat_timeout_ms} ms")
        for child in self.table.due_restarts():
            self.table.spawn(child)

    def _give_up(self, child: Child, code: int) -> None:
        """A flapping child: stop the node, loudly and with a non-zero status, rather than
        restart it forever (a service manager or an operator takes over)."""
        policy = child.policy
        log.error("event=restart_gave_up child=%s exit_code=%d failed_starts=%d window_ms=%d "
                  "action=stopping_node", child.name, code, policy.failed_starts(),
                  policy.window_ms)
        self.exit_code = EXIT_CHILD_FLAPPING
        self.stopping = True

    def _state_changed(self, child: Child, state: ProcessState, extra: dict) -> None:
        fields = " ".join(f"{k}={v}" for k, v in extra.items())
        log.info("event=child_state child=%s state=%s %s", child.name, state, fields)
        event = {"started": ProcessState.STARTING, "exited": ProcessState.DOWN}
        name = next((k for k, v in event.items() if v == state), state)
        body = {"role": child.role, "index": child.index, "state": state, **extra}
        try:
            self.net.events.send_multipart([f"{child.role}.{child.index}.{name}".encode(),
                                        encode_event(body)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass


def _replay_progress(shards: list[Child]) -> float:
    """The node's replay progress in [0, 1]: a ready shard counts as done."""
    done = sum(1.0 if c.state == ProcessState.READY else c.progress for c in shards)
    return done / max(1, len(shards))


def _restarted(shards: list) -> list[int]:
    """Shards this supervisor started more than once: the node did not restart since their
    copies were written, so a shard's crash lost nothing of them (its copies settle)."""
    return [child.index for child in shards if child.incarnation > 1]
