"""The children of the node: how each is started, its state, and its fate.

The supervisor only ever signals processes it spawned itself (it keeps their Popen objects,
or the ForkedProcess of a child its fork server made); a pid read from anywhere else is
never trusted.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import time

import psutil

from topics_actors.config import ProcessRole, ProcessState

from .restart_policy import RestartPolicy

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Child:
    role: ProcessRole
    index: int
    argv_for: object                    # callable(port) -> argv
    policy: RestartPolicy = dataclasses.field(default_factory=RestartPolicy)
    proc: subprocess.Popen | None = None     # or a fork_server.ForkedProcess
    state: ProcessState = ProcessState.DOWN
    incarnation: int = 0
    port: int = 0
    endpoint: str = ""
    ipc: str = ""
    progress: float = 0.0
    was_ready: bool = False             # this incarnation reported ready (restart_policy)
    started_ns: int = 0
    last_beat_ns: int = 0
    restart_at_ns: int = 0
    pass_fds: tuple[int, ...] = ()      # descriptors the child inherits (the HTTP socket)
    peer: bytes = b""                   # its control socket identity (to send it roles)
    quarantined: tuple = ()             # a shard's quarantined topics, as it last said
    unsettled: dict = dataclasses.field(default_factory=dict)   # {topic: epoch} it recovered
                                        # in and may not lead in (a cluster's new epoch)
    roles_sent: tuple[int, float] = (0, 0.0)   # (serial, monotonic s) of the last roles sent

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index:02d}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def describe(self) -> dict:
        return {"shard": self.index, "state": self.state, "pid": self.pid,
                "incarnation": self.incarnation, "endpoint": self.endpoint, "ipc": self.ipc,
                "replay_progress": self.progress}


class ProcessTable:
    def __init__(self, on_state_change, clock_ns=time.monotonic_ns):
        self.children: list[Child] = []
        self.on_state_change = on_state_change
        self.clock_ns = clock_ns
        self.inherited_fds: tuple[int, ...] = ()   # every child holds these (the data lock)
        self.fork_server = None                    # fork_server.ForkServer, once started

    def add(self, child: Child) -> None:
        self.children.append(child)

    def set_state(self, child: Child, state: ProcessState, **extra) -> None:
        if child.state != state:
            child.state = state
            child.was_ready = child.was_ready or state == ProcessState.READY
            self.on_state_change(child, state, extra)

    def spawn(self, child: Child) -> None:
        """Fork it from the fork server when there is one, else start a fresh interpreter."""
        argv = child.argv_for(child.port)
        fds = (*self.inherited_fds, *child.pass_fds)
        forked = self.fork_server.spawn(argv, fds) if self.fork_server else None
        child.proc = forked or subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                                close_fds=True, pass_fds=fds)
        child.incarnation += 1
        child.started_ns = child.last_beat_ns = self.clock_ns()
        child.restart_at_ns = 0
        child.progress = 0.0
        child.was_ready = False
        self.set_state(child, ProcessState.STARTING, pid=child.pid, incarnation=child.incarnation)

    def reap(self) -> list[tuple[Child, int]]:
        """Children that exited since the last call, with their exit codes."""
        exited = []
        for child in self.children:
            if child.proc is not None:
                code = child.proc.poll()
                if code is not None:
                    exited.append((child, code))
        return exited

    def schedule_restart(self, child: Child, code: int) -> bool:
        """Mark an exited child down and time its restart; False when its policy gives up
        (it is then left down)."""
        uptime_ms = (self.clock_ns() - child.started_ns) / 1e6
        delay_ms = child.policy.next_delay_ms(uptime_ms, child.was_ready)
        child.proc = None
        if delay_ms is None:
            self.set_state(child, ProcessState.DOWN, exit_code=code, restart="gave_up")
            return False
        child.restart_at_ns = self.clock_ns() + delay_ms * 1_000_000
        self.set_state(child, ProcessState.DOWN, exit_code=code, restart_in_ms=delay_ms)
        return True

    def due_restarts(self) -> list[Child]:
        now = self.clock_ns()
        return [c for c in self.children if c.proc is None and c.restart_at_ns
                and c.restart_at_ns <= now]

    def silent(self, timeout_ms: int) -> list[Child]:
        """Live children that have not heartbeat for `timeout_ms` (hung or SIGSTOPped)."""
        limit = self.clock_ns() - timeout_ms * 1_000_000
        return [c for c in self.children if c.proc is not None and c.proc.poll() is None
                and c.last_beat_ns < limit]

    def kill(self, child: Child, reason: str) -> None:
        if child.proc is not None and child.proc.poll() is None:
            status = _process_status(child.proc.pid)
            log.warning("event=child_killed child=%s pid=%d reason=%s status=%s", child.name,
                        child.pid, reason, status)
            child.proc.send_signal(signal.SIGKILL)

    def signal_stop(self, children: list[Child]) -> list[Child]:
        """SIGTERM the live ones among `children` (once); returns them."""
        live = [c for c in children if c.proc is not None and c.proc.poll() is None]
        for child in live:
            if child.state != ProcessState.STOPPING:
                self.set_state(child, ProcessState.STOPPING, pid=child.pid)
                child.proc.send_signal(signal.SIGTERM)
        return live

    def stop_all(self, grace_ms: int, roles: tuple[str, ...] | None = None) -> None:
        """SIGTERM the live children (of `roles`, or all), wait out the grace, SIGKILL."""
        targets = [c for c in self.children if roles is None or c.role in roles]
        live = self.signal_stop(targets)
        deadline = time.monotonic() + grace_ms / 1000
        for child in live:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(child, "stop grace period expired")
                child.proc.wait()
        for child in targets:
            if child.proc is not None and child.proc.poll() is not None:
                self.set_state(child, ProcessState.DOWN, exit_code=child.proc.returncode)


def _process_status(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def python_module_argv(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]

