"""Fault: one mutating filesystem call of the mixed workload fails (spec/storage.md 5.1
FaultFs, 5.3; section 7 invariants 1, 3, 4, 14, 15, 20, 56, 66).

    fault id          what strikes                                   where
    E-EIO-<op>-n      OSError(EIO) instead of the call               the n-th mutating call:
    E-ENOSPC-<op>-n   OSError(ENOSPC) instead of the call            write_at, sync_data,
    E-SHORT-n         a short write (half the buffer, then the       sync_all, set_len, open,
                      caller must loop)                              rename, remove, rmdir,
                                                                     makedirs, sync_dir

Method: a dry run traces every mutating call of tests/fault/mixed_workload.py as (op, index
in its class); each run arms one fault there (once) and lets the workload go on: a failed
turn answers every write in it with an error and its effects must never show; a failed
checkpoint, start or close is noted and the step goes on (a refused start is tried again:
the fault fired once). Asserted at the end, while the shards still run: every topic agrees
with the oracle (nothing acked lost, nothing failed visible, seqs of a failed batch are
reused or holes, never live); then a process crash and a recovery: the same again, one
more append per topic lands at head + 1 (a latched WAL is writable after a restart), a
checkpoint succeeds, fsck is clean. The error surfaced: a write was answered with an error,
a step failed, a shard counted a failed batch (its `failed_batches` statistic: a turn of
reads whose lazy retention logs a watermark answers the reads, with the floors unmoved), or
the call is one whose failure the engine absorbs by design (see ABSORBED) and the data
still checks out.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest

from tests.fault.mixed_workload import after_recovery, run_to_crash

EXHAUSTIVE = os.environ.get("TOPICS_TEST_EXHAUSTIVE") == "1"
KINDS = ("eio", "enospc", "short")
SAMPLE = 30


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []
    run = run_to_crash(str(tmp_path_factory.mktemp("trace") / "data"), None, trace=calls)
    assert run.outcome.failed == 0 and not run.outcome.steps_failed
    run.die()
    return calls


def points(trace: list, kind: str) -> list[int]:
    eligible = [n for n, (op, _) in enumerate(trace) if kind != "short" or op == "write_at"]
    if EXHAUSTIVE:
        return eligible
    sample = int(os.environ.get("TOPICS_TEST_SAMPLE", SAMPLE))
    rng = random.Random(f"io-{kind}")
    chosen = rng.sample(eligible[1:-1], min(len(eligible) - 2, max(0, sample - 2)))
    return sorted({eligible[0], eligible[-1], *chosen})


def fault_point(base: str, trace: list, n: int, kind: str) -> tuple[str, bool]:
    """Run the workload with the fault at call n; returns (op, whether the error surfaced)."""
    op, index = trace[n]
    run = run_to_crash(os.path.join(base, "data"), None, fault=(op, index, kind))
    where = f"{kind} at mutating call {n} ({op} #{index})"
    try:
        assert run.fs.fired == [(op, index, kind)], f"{where}: fired {run.fs.fired}"
        outcome = run.outcome
        surfaced = bool(outcome.failed or outcome.steps_failed or outcome.batches_failed)
        run.fs.clear()
        run.verify("keep", restarted=False)
        run.die()
        run.start()
        run.verify("keep")
        run.fsck()
        after_recovery(run)
    except AssertionError as error:
        raise AssertionError(f"{where}: {error}; failed steps "
                             f"{run.outcome.steps_failed}") from error
    finally:
        run.die()
    shutil.rmtree(base)
    return op, surfaced


@pytest.mark.parametrize("kind", KINDS)
def test_one_failing_call_loses_nothing_acked(tmp_path, trace, kind):
    silent = set()
    for n in points(trace, kind):
        op, surfaced = fault_point(str(tmp_path / f"{kind}-{n}"), trace, n, kind)
        if not surfaced:
            silent.add(op)
    if kind == "short":          # write_all_at loops: a short write is never an error
        assert not silent - {"write_at"}
    else:
        assert silent <= ABSORBED, f"errors swallowed without a trace: {silent - ABSORBED}"


# Calls whose failure the engine absorbs by design, with the data still intact: a failed
# unlink of an absorbed WAL file or a swept segment is retried by the next checkpoint.
ABSORBED = {"remove"}
