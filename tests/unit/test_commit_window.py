"""The adaptive group-commit window (shard/commit_window.py): bounded by the measured fsync
time within [floor, ceiling], a quiet slice that follows it, and an early close once the
previous commit's writers are back."""

import pytest

from topics_actors.shard.commit_window import CEILING_MS, FLOOR_MS, CommitWindow


def test_the_limit_follows_the_fsync_time_within_bounds():
    window = CommitWindow()
    assert window.limit_ms() == FLOOR_MS
    for _ in range(50):
        window.synced(4.0, 10)
    assert window.limit_ms() == pytest.approx(4.0, rel=0.01)
    for _ in range(50):
        window.synced(80.0, 10)                  # a slow disk: the ceiling holds
    assert window.limit_ms() == CEILING_MS
    for _ in range(80):
        window.synced(0.05, 10)                  # a fast disk: the floor holds
    assert window.limit_ms() == FLOOR_MS


def test_one_slow_fsync_moves_the_average_not_the_window_alone():
    window = CommitWindow()
    for _ in range(50):
        window.synced(1.0, 5)
    window.synced(30.0, 5)
    assert 1.0 < window.limit_ms() < 10.0


def test_quiet_slice_is_a_quarter_fsync_within_bounds():
    window = CommitWindow()
    for _ in range(50):
        window.synced(1.0, 5)
    assert window.quiet_ms() == pytest.approx(0.25, rel=0.02)
    for _ in range(50):
        window.synced(20.0, 5)
    assert window.quiet_ms() == 0.5


def test_the_window_closes_when_the_last_cohort_is_back():
    window = CommitWindow()
    assert not window.complete(100)              # no history: gather until quiet
    window.synced(1.0, 8)
    assert not window.complete(7) and window.complete(8)
    window.synced(1.0, 1)
    assert not window.complete(5)                # a lone writer is no cohort to wait for


def test_the_quiet_slice_follows_the_arrival_rate():
    window = CommitWindow()
    for _ in range(50):
        window.synced(0.08, 20)                  # a fast disk: a quarter fsync is 20 us
    assert window.quiet_ms() == 0.05             # the floor, until arrivals are seen
    for _ in range(50):
        window.arrived(0.12, 3)                  # three requests every 120 us
    assert window.quiet_ms() == pytest.approx(0.12, rel=0.02)
    for _ in range(50):
        window.arrived(5.0, 1)                   # stragglers: never past the ceiling
    assert window.quiet_ms() == 0.5
    window.arrived(1.0, 0)                       # a wake-up with nothing in it is no gap
    assert window.quiet_ms() == 0.5
