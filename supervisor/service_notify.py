"""systemd's readiness protocol (sd_notify(3)) without libsystemd: newline-separated
`KEY=value` lines in one datagram to the unix socket named by NOTIFY_SOCKET (a path, or an
abstract name when it starts with '@').

Without NOTIFY_SOCKET (a shell, a Procfile runner, `Type=simple`) every call is a no-op.
The variable is removed from the environment when read, so the children the supervisor
spawns never inherit it: only the main process speaks for the unit (`NotifyAccess=main`).
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


def notify_address(name: str) -> str | bytes:
    """NOTIFY_SOCKET's value as a socket address: '@name' is the abstract name '\\0name'."""
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    return name


class ServiceNotifier:
    def __init__(self, env: dict | None = None, clock_s=time.monotonic):
        env = os.environ if env is None else env
        name = env.pop("NOTIFY_SOCKET", None)
        watchdog_usec = env.pop("WATCHDOG_USEC", None)
        watchdog_pid = env.pop("WATCHDOG_PID", None)
        self.address = notify_address(name) if name else None
        self.sock: socket.socket | None = None
        self.ready_sent = False
        self.status = ""
        self.clock_s = clock_s
        # WATCHDOG=1 at half the interval systemd expects (only when meant for this process)
        self.watchdog_s = (int(watchdog_usec) / 2e6 if watchdog_usec and watchdog_usec.isdigit()
                           and watchdog_pid in (None, str(os.getpid())) else 0.0)
        self._next_watchdog_s = 0.0

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *lines: str) -> None:
        """One datagram; a failure is logged, never raised (the node runs on regardless)."""
        if self.address is None:
            return
        try:
            if self.sock is None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self.sock.sendto("\n".join(lines).encode(), socket.MSG_DONTWAIT, self.address)
        except OSError as error:
            log.warning("event=notify_failed socket=%r error=%r", self.address, error)

    def report(self, status: str, ready: bool) -> None:
        """STATUS= when the text changed; READY=1 with it the first time `ready` holds."""
        if ready and not self.ready_sent:
            self.ready_sent = True
            self.status = status
            self.send("READY=1", f"STATUS={status}")
        elif status != self.status:
            self.status = status
            self.send(f"STATUS={status}")

    def stopping(self, status: str) -> None:
        self.status = status
        self.send("STOPPING=1", f"STATUS={status}")

    def keep_alive(self) -> None:
        """WATCHDOG=1 when it is due (with WatchdogSec=; a no-op otherwise)."""
        if self.watchdog_s and self.clock_s() >= self._next_watchdog_s:
            self._next_watchdog_s = self.clock_s() + self.watchdog_s
            self.send("WATCHDOG=1")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
