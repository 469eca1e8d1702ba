"""Stopping a node, and what systemd hears of it (issue 19), on real nodes.

| case | method | holds when |
|---|---|---|
| parked long poll | a diff with wait_ms 20000 parked in | 200, the caught-up page, within 3 s; |
| | its shard, then SIGTERM | the gateway drains itself, nothing is killed, |
| | | the node is gone within 6 s (not 10.5) |
| SIGTERM ignored | every child SIGSTOPped, then SIGTERM | the stop takes one 3 s budget, not |
| | with TOPICS_STOP_GRACE_MS 3000 | one per phase; all killed, gateway and |
| | | compactor first |
| notification | NOTIFY_SOCKET: an abstract datagram | READY=1 from the supervisor, after STATUS |
| | socket the test binds (SO_PASSCRED) | lines, once /v0/ready answers 200 at once; |
| | | STOPPING=1 at SIGTERM; no child inherits it |
"""

import os
import signal
import socket
import struct
import threading
import time

import pytest

from tests.support import HttpReply, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_a_stop_answers_a_parked_long_poll_and_the_gateway_drains(make_node):
    node = make_node(shards=1)
    assert node.http("POST", "/v0/topics/polled", {"records": [{"data": 1}]}).status == 201
    replies = []

    def poll():
        try:
            replies.append(node.http("POST", "/v0/topics/polled/diff",
                                     {"from_seq": 1, "wait_ms": 20000}, timeout_s=30))
        except OSError as error:          # the connection closed without an answer
            replies.append(error)
    poller = threading.Thread(target=poll)
    poller.start()
    client = node.client()
    wait_for(lambda: client.shard_statuses()[0]["long_polls"] == 1, 10, "the diff to park")
    t0 = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    poller.join(30)
    answered_s = time.monotonic() - t0
    assert node.proc.wait(30) == 0
    stopped_s = time.monotonic() - t0
    reply = replies[0]
    assert isinstance(reply, HttpReply) and reply.status == 200, reply
    page = reply.json()
    assert (page["records"], page["caught_up"], page["next_from_seq"]) == ([], True, 1)
    assert answered_s < 3 and stopped_s < 6, (answered_s, stopped_s)   # was 10.5 s
    log = node.log()
    assert "event=stopped gateway=0 unfinished=0" in log
    assert "event=child_killed" not in log


def test_children_that_ignore_sigterm_are_killed_within_one_budget(make_node):
    node = make_node(shards=2, env={"TOPICS_STOP_GRACE_MS": "3000",
                                    "TOPICS_HEARTBEAT_TIMEOUT_MS": "60000"})
    wait_for(lambda: all(p["state"] == "ready" for p in node.status()["processes"]), 30,
             "the gateway, compactor and reclaimer")
    children = node.children()
    assert len(children) == 6       # 2 shards, compactor, reclaimer, gateway, fork server
    for child in children:
        child.send_signal(signal.SIGSTOP)      # a stopped process does not act on SIGTERM
    t0 = time.monotonic()
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0
    stopped_s = time.monotonic() - t0
    assert 2.5 < stopped_s < 5.0, stopped_s    # one 3 s budget, not 3 s per phase (9.2 s)
    killed = [line for line in node.log().splitlines()
              if "reason=stop grace period expired" in line]
    names = [line.split("child=")[1].split()[0] for line in killed]
    assert sorted(names) == ["compactor-00", "gateway-00", "reclaimer-00", "shard-00",
                             "shard-01"]
    assert names[0] == "gateway-00" and names[1] == "compactor-00"


class NotifyListener:
    """What systemd does for Type=notify: a datagram socket (here with an abstract name)
    that records each message's lines and its sender's pid."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.name = f"@topics-test-notify-{os.getpid()}-{id(self)}"
        self.sock.bind(b"\0" + self.name[1:].encode())
        self.messages: list[tuple[int, list[str]]] = []

    def until(self, line: str, timeout_s: float) -> float:
        """Receive until a message holds `line`; the monotonic time it arrived."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except TimeoutError:
                raise AssertionError(f"no {line} within {timeout_s}s: {self.messages}")
            pid = next(struct.unpack("3i", body)[0] for level, kind, body in ancillary
                       if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS))
            self.messages.append((pid, data.decode().split("\n")))
            if line in self.messages[-1][1]:
                return time.monotonic()

    def close(self) -> None:
        self.sock.close()


def test_systemd_hears_ready_once_ready_answers_and_stopping_at_sigterm(make_node):
    listener = NotifyListener()
    try:
        node = make_node(shards=2, env={"NOTIFY_SOCKET": listener.name}, start=False)
        node.start(wait_ready=False)
        listener.until("READY=1", 30)
        reply = node.http("GET", "/v0/ready")        # at once: no retry, no wait
        assert reply.status == 200 and reply.json()["status"] == "ready"
        *before, last = [lines for _, lines in listener.messages]
        # not ready yet: shards replaying, or (when they were quicker) the gateway starting;
        # or nothing before READY=1, when every child was ready by the supervisor's first look
        assert all(lines[0].startswith(("STATUS=replaying: shards ", "STATUS=starting: "))
                   for lines in before[:1]), before
        assert last[0] == "READY=1" and last[1].startswith("STATUS=ready: shards 2/2, gateways 1/1")
        for child in node.children():
            assert "NOTIFY_SOCKET" not in child.environ(), child.cmdline()
        node.proc.send_signal(signal.SIGTERM)
        listener.until("STOPPING=1", 5)
        assert node.proc.wait(30) == 0
        assert {pid for pid, _ in listener.messages} == {node.proc.pid}
    finally:
        listener.close()
