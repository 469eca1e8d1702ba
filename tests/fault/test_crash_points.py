"""Fault: the process dies after each mutating filesystem call of a mixed workload, then the
machine loses power (spec/storage.md 5.1 crash-after-N, section 7 invariants).

    fault id        what strikes                                              where
    C-KEEP-n        process death before mutating call n; the page cache      any call of
                    survives (every written byte, every directory entry)      the workload
    C-DROP-n        ... and power loss: unsynced bytes and unsynced            (WAL appends,
                    directory entries are lost                                rotations,
    C-TORN-n        ... power loss keeping each file's pending writes up to   segment and
                    a random one, cut to a strict prefix (a torn write)       snapshot writes,
    C-GARBLE-n      ... power loss keeping every byte, one byte of each       unlinks, layout,
                    file's last pending write flipped (a bad sector)          truncation)

Method: tests/fault/mixed_workload.py runs the workload (four durability classes, topic
creates and deletes, appends, group commits, record deletes, records cap, byte cap and TTL
evictions, flushes, rotations, three checkpoints, restarts in the middle) on a CrashFs that
dies at call n; every run is deterministic. Then CrashFs.power_loss(mode), a fresh recovery
(layout, both shards replay, a new compactor), and the oracle's check of every topic
(tests/fault/oracle.py: invariants 1-5, 7, 8, 37, 41-44, 60, 61), fsck clean; then one
more append per topic (head + 1, never a reused seq for disk and fsync: 9, 10), a
checkpoint that must succeed, a second crash and recovery that must give the same state
(21, 22, 30) and fsck clean again.

The default suite runs a seeded sample of points per mode, always the first and the last;
TOPICS_TEST_EXHAUSTIVE=1 runs every point (TOPICS_TEST_SAMPLE=k widens the sample).
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.fault.mixed_workload import (
    RETAINING, crash_points, recover_and_check, run_to_crash,
)
from tools.testing.crash_fs import POWER_MODES

EXHAUSTIVE = os.environ.get("TOPICS_TEST_EXHAUSTIVE") == "1"
PARTS = 6 if EXHAUSTIVE else 1
SAMPLE = 40


@pytest.fixture(scope="module")
def total_calls(tmp_path_factory) -> int:
    """A run without a crash: its mutating calls, and the oracle agrees with the live state."""
    run = run_to_crash(str(tmp_path_factory.mktemp("dry") / "data"), None)
    assert run.outcome.failed == 0 and not run.outcome.steps_failed
    run.verify("keep", restarted=False)
    evicted = {name: run.models[name].floor_seen for name in RETAINING}
    assert all(evicted.values()), f"a retaining topic evicted nothing: {evicted}"
    run.fsck()
    total = run.fs.mutations()
    run.die()
    assert total > 300
    return total


def sweep_point(base: str, n: int, mode: str) -> None:
    run = run_to_crash(os.path.join(base, "data"), n)
    run.die()
    recover_and_check(run, mode, f"crash at mutating call {n} (step {run.step_name!r}), "
                                 f"power loss {mode!r}")
    shutil.rmtree(base)


@pytest.mark.parametrize("part", range(PARTS))
@pytest.mark.parametrize("mode", POWER_MODES)
def test_crash_after_each_mutating_call(tmp_path, total_calls, mode, part):
    points = crash_points(total_calls, f"sweep-{mode}", SAMPLE)
    assert points[0] == 0 and points[-1] == total_calls
    for n in points[part::PARTS]:
        sweep_point(str(tmp_path / f"{mode}-{n}"), n, mode)
