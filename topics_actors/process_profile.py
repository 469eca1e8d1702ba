"""An opt-in cProfile of a node process, for finding where its time goes under a benchmark
(docs/BENCHMARKS.md "Profiles"): with TOPICS_PROFILE_DIR set, each process the supervisor
spawns runs under cProfile and writes `<dir>/<process name>-<pid>.prof` when it stops
cleanly (SIGTERM; a killed process writes nothing). Read one with
`python3 -m pstats <file>`. Off by default: the profiler slows every Python call."""

from __future__ import annotations

import contextlib
import logging
import os
import re

log = logging.getLogger(__name__)

PROFILE_DIR_ENV = "TOPICS_PROFILE_DIR"


@contextlib.contextmanager
def profiled(process_name: str):
    """Profile the body when TOPICS_PROFILE_DIR names a directory."""
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
