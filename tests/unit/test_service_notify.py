"""The sd_notify client against a datagram socket the test binds, as systemd does: a path
and an abstract ('@') name, READY=1 once with its STATUS, STATUS only when it changes,
STOPPING=1, WATCHDOG=1 at half of WATCHDOG_USEC on an injected clock, the variables taken
out of the environment (children never inherit them), and a no-op without NOTIFY_SOCKET."""

import os
import select
import socket

import pytest

from supervisor.service_notify import ServiceNotifier

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(params=["path", "abstract"])
def systemd(request, tmp_path):
    """(the socket systemd would listen on, NOTIFY_SOCKET's value for it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        name = str(tmp_path / "notify")
        sock.bind(name)
    else:
        name = f"@topics-test-notify-{os.getpid()}-{id(sock)}"
        sock.bind(b"\0" + name[1:].encode())
    sock.settimeout(5)
    yield sock, name
    sock.close()


def received(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


def nothing_waiting(sock: socket.socket) -> bool:
    return select.select([sock], [], [], 0)[0] == []


def test_ready_once_status_on_change_and_stopping(systemd):
    sock, name = systemd
    env = {"NOTIFY_SOCKET": name, "PATH": "/bin"}
    notifier = ServiceNotifier(env)
    assert env == {"PATH": "/bin"}                  # not inherited by the children
    notifier.report("replaying: shards 0/2 ready", False)
    assert received(sock) == ["STATUS=replaying: shards 0/2 ready"]
    notifier.report("replaying: shards 0/2 ready", False)
    notifier.report("ready: 2 shards", True)
    assert received(sock) == ["READY=1", "STATUS=ready: 2 shards"]
    notifier.report("ready: 2 shards", True)
    notifier.report("replaying: shards 1/2 ready", False)     # a shard restarted
    assert received(sock) == ["STATUS=replaying: shards 1/2 ready"]
    notifier.report("ready: 2 shards", True)
    assert received(sock) == ["STATUS=ready: 2 shards"]          # READY=1 only once
    notifier.stopping("stopping: gateways")
    assert received(sock) == ["STOPPING=1", "STATUS=stopping: gateways"]
    assert nothing_waiting(sock)
    notifier.close()


def test_watchdog_pings_at_half_the_interval(systemd):
    sock, name = systemd
    now = [100.0]
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "4000000", "WATCHDOG_PID": str(os.getpid())}
    notifier = ServiceNotifier(env, clock_s=lambda: now[0])
    notifier.keep_alive()
    assert received(sock) == ["WATCHDOG=1"]
    now[0] += 1.5
    notifier.keep_alive()
    assert nothing_waiting(sock)
    now[0] += 0.5
    notifier.keep_alive()
    assert received(sock) == ["WATCHDOG=1"]
    other = ServiceNotifier({"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "4000000",
                             "WATCHDOG_PID": "1"})        # meant for another process
    other.keep_alive()
    assert nothing_waiting(sock)
    for made in (notifier, other):
        made.close()


def test_without_notify_socket_nothing_is_sent():
    notifier = ServiceNotifier({})
    assert not notifier.enabled
    notifier.report("ready", True)
    notifier.stopping("stopping")
    notifier.keep_alive()
    assert notifier.sock is None


def test_a_missing_socket_is_logged_not_raised(tmp_path, caplog):
    notifier = ServiceNotifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    notifier.report("ready", True)
    assert "event=notify_failed" in caplog.text
    notifier.close()
