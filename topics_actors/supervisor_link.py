"""The child's side of the supervisor relationship: die with the parent, say hello, beat.

Children ask the kernel to SIGTERM them when the supervisor dies (PR_SET_PDEATHSIG) and also
check their parent pid every loop turn, so no child outlives a killed supervisor.
"""

from __future__ import annotations

import logging
import os
import signal
import time

import zmq

from topics_actors.config import ProcessState
from topics_actors.errors import TopicsError
from topics_actors.libc import PR_SET_PDEATHSIG, prctl
from topics_actors.protocol import decode, encode
from topics_actors.protocol.control import Heartbeat, Hello

log = logging.getLogger(__name__)


def die_with_parent(parent_pid: int) -> None:
    if not prctl(PR_SET_PDEATHSIG, signal.SIGTERM):
        log.warning("event=pdeathsig_unavailable")
    if os.getppid() != parent_pid:   # the parent died before prctl took effect
        raise SystemExit("supervisor is gone")


class SupervisorLink:
    def __init__(self, ctx: zmq.Context, endpoint: str, role: str, index: int,
                 parent_pid: int, interval_ms: int):
        self.role, self.index, self.parent_pid = role, index, parent_pid
        self.interval_ns = interval_ms * 1_000_000
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 100)
        self.sock.connect(endpoint)
        self._next_beat_ns = 0
        self.state = ProcessState.STARTING
        self.progress = 0.0
        self.quarantined: list = []
        self.unsettled: dict = {}

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent_pid

    def receive(self) -> list:
        """Messages the supervisor sent (replica roles), without blocking; one it cannot
        read is logged and dropped (the supervisor sends the whole state again)."""
        got = []
        while True:
            try:
                raw = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return got
            try:
                got.append(decode(raw)[1])
            except TopicsError as error:
                log.warning("event=bad_supervisor_message error=%r", error.message)

    def send(self, msg) -> None:
        self._send(msg)

    def _send(self, msg) -> None:
        try:
            self.sock.send(encode(msg, 0), zmq.NOBLOCK)
        except zmq.Again:
            pass   # the supervisor is not reading; it will notice the silence itself

    def hello(self, endpoint: str, ipc: str) -> None:
        self._send(Hello(self.role, self.index, os.getpid(), endpoint, ipc))

    def beat(self, state: ProcessState | None = None, progress: float | None = None,
             force: bool = False, quarantined: list | None = None,
             unsettled: dict | None = None) -> None:
        changed = (state is not None and state != self.state) or (
            quarantined is not None and quarantined != self.quarantined) or (
            unsettled is not None and unsettled != self.unsettled)
        self.state = state or self.state
        if quarantined is not None:
            self.quarantined = quarantined
        if unsettled is not None:
            self.unsettled = unsettled
        self.progress = self.progress if progress is None else progress
        now = time.monotonic_ns()
        if force or changed or now >= self._next_beat_ns:
            self._next_beat_ns = now + self.interval_ns
            self._send(Heartbeat(self.role, self.index, os.getpid(), self.state, self.progress,
                                 self.quarantined, self.unsettled or None))

    def keep_alive(self, state: ProcessState | None = None, force: bool = False) -> bool:
        """Beat (progress 1.0); False once the supervisor is gone."""
        self.beat(state, 1.0, force)
        return self.parent_alive()

    def ms_until_beat(self) -> float:
        return max(0.0, (self._next_beat_ns - time.monotonic_ns()) / 1e6)

    def close(self) -> None:
        self.sock.close(0)


def stop_on_signals(server) -> None:
    """SIGTERM and SIGINT set `server.stopping`; the server's loop ends its turn and stops."""
    def stop(_signum, _frame):
        server.stopping = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
