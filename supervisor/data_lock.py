"""The advisory lock that keeps a second server off a data dir.

The supervisor takes it and hands the descriptor down to every child it spawns. An flock
belongs to the open file, so the lock lasts until the last process holding that file is
gone: a supervisor killed with -9 leaves it held by children that are still shutting down,
and a new supervisor waits for them instead of replaying WALs that an orphan is still
writing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time

from topics_actors.errors import DataDirLocked

log = logging.getLogger(__name__)

LOCK_NAME = ".topics.lock"
RETRY_S = 0.05


class DataDirLock:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, LOCK_NAME)
        self.fd = -1

    def acquire(self, wait_ms: int = 0) -> None:
        """Take the lock, waiting up to wait_ms for a holder to go away; DataDirLocked
        (naming the holder) if it is still there then."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + wait_ms / 1000
        waited = False
        while not _try_lock(fd):
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown pid"
            if time.monotonic() >= deadline:
                os.close(fd)
                where = os.path.dirname(self.path)
                raise DataDirLocked(f"data dir {where!r} is in use by another topics server "
                                    f"({holder}) or by processes it started that have not "
                                    f"exited; stop them first")
            if not waited:
                log.warning("event=data_dir_busy holder=%r wait_ms=%d", holder, wait_ms)
                waited = True
            time.sleep(RETRY_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
