"""An opt-in cProfile of a node process, for finding where its time goes under a benchmark
(docs/BENCHMARKS.md "Profiles"): with TOPICS_PROFILE_DIR set, each process the supervisor
spawns runs under cProfile and writes `<dir>/<process name>-<pid>.prof` when it stops
cleanly (SIGTERM; a killed process writes nothing). Read one with
`python3 -m pstats <file>`. Off by default: the profiler slows every Python call.

Where memory goes, the same way: with TOPICS_TRACEMALLOC_DIR set, each process traces its
allocations (tracemalloc, 3 frames) and a thread of its own writes a snapshot,
`<dir>/<process name>-<pid>-<n>.snap`, every TOPICS_TRACEMALLOC_S seconds (60 by
default). Read them with `tools/bench/heap_snapshots.py`. Tracing slows every allocation
and costs memory of its own, and a snapshot of a large heap holds the process for seconds
(long enough to miss a heartbeat on a loaded machine); the snapshots name what is live, not
the allocator's free pages."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import time

log = logging.getLogger(__name__)

PROFILE_DIR_ENV = "TOPICS_PROFILE_DIR"
TRACEMALLOC_DIR_ENV = "TOPICS_TRACEMALLOC_DIR"
TRACEMALLOC_S_ENV = "TOPICS_TRACEMALLOC_S"
TRACEMALLOC_FRAMES = 3


@contextlib.contextmanager
def profiled(process_name: str):
    """Profile the body when TOPICS_PROFILE_DIR names a directory (and trace its memory
    when TOPICS_TRACEMALLOC_DIR does)."""
    _trace_memory(process_name)
    directory = os.environ.get(PROFILE_DIR_ENV, "").strip()
    if not directory:
        yield
        return
    import cProfile      # here: opt-in, and kept out of the image children are forked from
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", process_name)
        path = os.path.join(directory, f"{name}-{os.getpid()}.prof")
        try:
            os.makedirs(directory, exist_ok=True)
            profiler.dump_stats(path)
            log.info("event=profile_written path=%s", path)
        except OSError as exc:
            log.error("event=profile_failed path=%s error=%r", path, exc)


def _trace_memory(process_name: str) -> None:
    """Start tracemalloc and the thread that writes its snapshots, if asked to."""
    directory = os.environ.get(TRACEMALLOC_DIR_ENV, "").strip()
    if not directory:
        return
    import threading     # here: opt-in, as cProfile
    import tracemalloc
    period_s = float(os.environ.get(TRACEMALLOC_S_ENV, "60") or 60)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", process_name)
    os.makedirs(directory, exist_ok=True)
    tracemalloc.start(TRACEMALLOC_FRAMES)

    def write_snapshots() -> None:
        for n in itertools.count():
            time.sleep(period_s)
            path = os.path.join(directory, f"{name}-{os.getpid()}-{n:04d}.snap")
            try:
                tracemalloc.take_snapshot().dump(path)
            except OSError as exc:
                log.error("event=tracemalloc_failed path=%s error=%r", path, exc)
                return
    threading.Thread(target=write_snapshots, name="tracemalloc", daemon=True).start()
