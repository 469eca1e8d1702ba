"""RestartPolicy with an injected clock: the backoff sequence and its reset after a stable
uptime; giving up after more than `max_restarts` failed starts (deaths before ready) within
`window_ms`, and never for deaths after ready; 0 disables the limit; old failures age out."""

import pytest

from supervisor.restart_policy import RestartPolicy

pytestmark = pytest.mark.timeout(10)
MS = 1_000_000


class Clock:
    def __init__(self):
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ms: int) -> None:
        self.now_ns += ms * MS


def policy(clock: Clock, **limits) -> RestartPolicy:
    return RestartPolicy(clock_ns=clock, **limits)


def restart(p: RestartPolicy, clock: Clock, times: int, every_ms: int, was_ready: bool = False):
    """`times` exits, `every_ms` apart, each granted a restart."""
    for _ in range(times):
        assert p.next_delay_ms(50, was_ready) is not None
        clock.advance(every_ms)


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_stable_uptime():
    clock = Clock()
    p = policy(clock, max_restarts=0)
    delays = [p.next_delay_ms(10, was_ready=True) for _ in range(9)]
    assert delays == [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000]
    assert p.next_delay_ms(30_000, was_ready=True) == 0
    assert p.next_delay_ms(10, was_ready=True) == 100


def test_gives_up_on_the_failed_start_past_the_maximum_within_the_window():
    clock = Clock()
    p = policy(clock, max_restarts=3, window_ms=60_000)
    restart(p, clock, 3, 1_000)
    assert p.failed_starts() == 3
    assert p.next_delay_ms(50, was_ready=False) is None


def test_failed_starts_older_than_the_window_age_out():
    clock = Clock()
    p = policy(clock, max_restarts=3, window_ms=60_000)
    restart(p, clock, 3, 20_000)                    # at 0, 20 and 40 s
    assert p.failed_starts() == 2                   # at 60 s, the first one is out
    assert p.next_delay_ms(50, was_ready=False) is not None
    assert p.next_delay_ms(50, was_ready=False) is None   # 20, 40, 60, 60: four in the window


def test_deaths_after_ready_never_give_up():
    """A child killed right after each start (a kill test, a poison request) keeps being
    restarted: only a child that cannot come up is flapping."""
    clock = Clock()
    p = policy(clock, max_restarts=2, window_ms=60_000)
    restart(p, clock, 50, 100, was_ready=True)
    assert p.failed_starts() == 0
    assert p.next_delay_ms(100, was_ready=False) is not None


def test_zero_means_no_limit_and_the_record_stays_bounded():
    clock = Clock()
    p = policy(clock, max_restarts=0, window_ms=60_000)
    restart(p, clock, 100, 1_000)
    assert len(p.failed_starts_ns) == 60         # only the window's failures are kept


def test_defaults_are_the_node_config_defaults():
    from topics_actors.config import NodeConfig
    p, config = RestartPolicy(), NodeConfig()
    assert (p.max_restarts, p.window_ms) == (config.restart_max, config.restart_window_ms)
    assert NodeConfig.from_env({"TOPICS_RESTART_MAX": "4", "TOPICS_RESTART_WINDOW_MS": "9"}
                               ).restart_max == 4
