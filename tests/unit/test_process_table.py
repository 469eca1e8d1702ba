"""ProcessTable with real, short-lived child processes (`python -c ...`) and an injected
clock: spawn and reap with exit codes, restart scheduling with backoff, giving up on a child
that keeps failing to start, silence detection and SIGKILL, stop with grace then SIGKILL,
and the events it reports. Every child is killed and reaped at teardown."""

import os
import signal
import sys

import pytest

from supervisor.process_table import Child, ProcessTable
from supervisor.restart_policy import RestartPolicy
from tests.support import wait_for

pytestmark = pytest.mark.timeout(30)
MS = 1_000_000


class Clock:
    def __init__(self):
        self.now_ns = 1_000_000 * MS     # never 0: a restart time of 0 means none is due

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ms: int) -> None:
        self.now_ns += ms * MS


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def table(clock):
    events = []
    made = ProcessTable(lambda child, state, extra: events.append((child.name, state, extra)),
                        clock_ns=clock)
    made.events = events
    yield made
    for child in made.children:
        if child.proc is not None and child.proc.poll() is None:
            child.proc.kill()
        if child.proc is not None:
            child.proc.wait()


def python(code: str, **fields) -> Child:
    policy = fields.pop("policy", None) or RestartPolicy()
    return Child(fields.pop("role", "shard"), fields.pop("index", 0),
                 lambda _port: [sys.executable, "-c", code], policy, **fields)


def reaped(table: ProcessTable) -> list[tuple[str, int]]:
    return wait_for(lambda: [(c.name, code) for c, code in table.reap()], 10, "an exit")


def test_spawn_then_reap_reports_the_exit_code(table):
    child = python("raise SystemExit(3)", index=1)
    table.add(child)
    table.spawn(child)
    assert (child.incarnation, child.state) == (1, "starting")
    assert table.events == [("shard-01", "starting", {"pid": child.pid, "incarnation": 1})]
    assert reaped(table) == [("shard-01", 3)]


def test_restarts_are_scheduled_with_backoff_and_come_due_on_the_clock(table, clock):
    child = python("pass")
    table.add(child)
    table.spawn(child)
    reaped(table)
    assert table.schedule_restart(child, 0)
    assert child.proc is None and child.state == "down"
    assert table.events[-1] == ("shard-00", "down", {"exit_code": 0, "restart_in_ms": 0})
    assert table.due_restarts() == [child]
    table.spawn(child)
    reaped(table)
    assert table.schedule_restart(child, 0)
    assert table.events[-1][2]["restart_in_ms"] == 100
    assert table.due_restarts() == []
    clock.advance(99)
    assert table.due_restarts() == []
    clock.advance(1)
    assert table.due_restarts() == [child]
    table.spawn(child)
    assert child.incarnation == 3


def test_a_child_that_keeps_failing_to_start_is_given_up(table):
    child = python("raise SystemExit(1)", policy=RestartPolicy(max_restarts=1))
    table.add(child)
    table.spawn(child)
    reaped(table)
    assert table.schedule_restart(child, 1)
    table.spawn(child)
    reaped(table)
    assert not table.schedule_restart(child, 1)
    assert table.events[-1] == ("shard-00", "down", {"exit_code": 1, "restart": "gave_up"})
    assert child.proc is None and table.due_restarts() == []


def test_a_child_that_was_ready_is_never_given_up(table):
    child = python("pass", policy=RestartPolicy(max_restarts=1))
    table.add(child)
    for _ in range(4):
        table.spawn(child)
        table.set_state(child, "ready", pid=child.pid)
        reaped(table)
        assert table.schedule_restart(child, 0)
    assert child.policy.failed_starts() == 0


def test_a_silent_child_is_found_and_killed(table, clock):
    child = python("import time; time.sleep(60)", role="compactor")
    table.add(child)
    table.spawn(child)
    assert table.silent(1_000) == []
    clock.advance(999)
    assert table.silent(1_000) == []
    clock.advance(2)
    assert table.silent(1_000) == [child]
    table.kill(child, "test")
    assert reaped(table) == [("compactor-00", -signal.SIGKILL)]
    assert table.silent(1_000) == []                     # a dead child is not silent


def test_stop_all_terms_then_kills_after_the_grace(table, tmp_path):
    armed = tmp_path / "armed"
    polite = python("import time; time.sleep(60)", role="reclaimer")
    stubborn = python("import signal, time, pathlib; signal.signal(signal.SIGTERM, "
                      f"signal.SIG_IGN); pathlib.Path({str(armed)!r}).touch(); time.sleep(60)",
                      role="gateway")
    for child in (polite, stubborn):
        table.add(child)
        table.spawn(child)
    wait_for(armed.exists, 10, "the stubborn child to ignore SIGTERM")
    table.stop_all(300)
    assert polite.proc.returncode == -signal.SIGTERM
    assert stubborn.proc.returncode == -signal.SIGKILL
    assert [(name, state) for name, state, _ in table.events[-2:]] == [
        ("reclaimer-00", "down"), ("gateway-00", "down")]


def test_children_inherit_only_the_descriptors_they_are_given(table):
    kept_r, kept_w = os.pipe()
    other_r, other_w = os.pipe()
    try:
        table.inherited_fds = (kept_w,)
        child = python(f"import os; os.write({kept_w}, b'k'); os.fstat({other_w})")
        table.add(child)
        table.spawn(child)
        assert reaped(table) == [("shard-00", 1)]      # the other descriptor was closed
        assert os.read(kept_r, 1) == b"k"
    finally:
        for fd in (kept_r, kept_w, other_r, other_w):
            os.close(fd)


def test_the_policy_sees_how_long_the_child_ran(table, clock):
    child = python("import time; time.sleep(60)", policy=RestartPolicy(max_restarts=0))
    table.add(child)
    table.spawn(child)
    child.policy.consecutive_failures = 5          # a child that had been failing
    clock.advance(30_000)                         # then ran for the stable uptime
    child.proc.send_signal(signal.SIGKILL)
    reaped(table)
    assert table.schedule_restart(child, -9)
    assert table.events[-1][2]["restart_in_ms"] == 0
