"""fsck: verify a data dir, read-only (spec/storage.md 1).

Checks every WAL file of every group (current and retired), every snapshot file, and every
segment the newest valid snapshot lists; reports each problem with its file and offset.

An *error* is damage recovery cannot simply undo or that endangers records: a corrupt
snapshot or segment record, corruption inside a WAL file, a checkpoint position the WAL
cannot honour, a missing file someone still needs. A *warning* is what recovery handles by
design (the torn tail of a group's last file, an orphan segment of a crashed compactor) or
what a running server can cause (a file that vanished during the check).

Nothing is locked, created or written, so the check can run next to a live server.

    report.py           Report, Problem, SnapshotInfo; the severities ERROR and WARNING
    scan.py             one pass: every file listed and sized up front, read with pread
    snapshot_check.py   snapshot files decode into bodies recovery can use
    wal_check.py        WAL frames, log ends, missing files, snapshot positions
    segment_check.py    listed segments against the snapshot and record by record; orphans
    recovery_check.py   what a restart would quarantine, found by recovery's own rules
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

from topics_actors.fsck.recovery_check import RecoveryCheck
from topics_actors.fsck.report import ERROR, WARNING, Problem, Report, SnapshotInfo
from topics_actors.fsck.scan import Scan
from topics_actors.fsck.segment_check import SegmentCheck
from topics_actors.fsck.snapshot_check import SnapshotCheck
from topics_actors.fsck.wal_check import WalCheck
from topics_actors.progress_meter import Progress
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment_tier import Tiers

__all__ = ["ERROR", "WARNING", "PROGRESS_EVERY", "Problem", "Report", "SnapshotInfo", "check",
           "looks_like_data_dir"]

log = logging.getLogger(__name__)

PROGRESS_EVERY = 4096             # frames or records between looks at the clock


DATA_DIR_MARKS = ("wal", "meta", "topics")   # what a node creates in its data directory


def looks_like_data_dir(path: str) -> bool:
    """Whether `path` holds any of what a node creates there (even a damaged one does)."""
    return any(os.path.isdir(os.path.join(path, mark)) for mark in DATA_DIR_MARKS)


def check(data_dir: str, dump: bool = False, progress: Progress | None = None,
          out: TextIO | None = None, cold_dir: str | None = None) -> Report:
    """Verify `data_dir` without modifying it. With `dump`, one line per WAL frame and
    segment record goes to `out` (stdout). `progress(bytes_done, bytes_total)` is called at
    most ~10 times a second, with monotone values, and last with (total, total)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"not a directory: {data_dir}")
    scan = Scan(RealFs(), Tiers(data_dir, cold_dir), (out or sys.stdout) if dump else None,
                PROGRESS_EVERY)
    scan.plan(progress)
    SnapshotCheck(scan).run()
    wal = WalCheck(scan)
    wal.run()
    for index, (snap_id, snap_rel, body) in enumerate(scan.valid[:2]):
        wal.check_positions(snap_id, snap_rel, body, fallback=index > 0)
    SegmentCheck(scan).run()
    RecoveryCheck(scan).run()
    scan.progress.finish()
    log.debug("event=fsck_done dir=%s errors=%d", data_dir, scan.report.errors)
    return scan.report
