"""The segment lock: the compactor and the reclaimer never change segment files at once.

The compactor holds it for a whole checkpoint (it creates segment files, flips del bytes and
writes the snapshot that lists them); the reclaimer holds it while it unlinks files no kept
snapshot lists and while it finishes a cold relocation. So a file the reclaimer sees unlisted
is never one a checkpoint in progress is about to list, and a del byte is never flipped in
a hot copy the reclaimer is deleting. It is an flock on `<data>/segments.lock`: a process
killed while holding it releases it with its file descriptor. Shards never take it (reads
need no lock: listed files are only ever appended to, flipped or replaced by an equal copy).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable

from topics_actors.errors import StorageError

POLL_S = 0.01


class SegmentLock:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, "segments.lock")
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def acquire(self, timeout_s: float, tick: Callable[[], None] = lambda: None) -> None:
        """Wait for the lock (calling `tick` meanwhile, e.g. a heartbeat)."""
        deadline = time.monotonic() + timeout_s
        while not self.try_acquire():
            if time.monotonic() >= deadline:
                raise StorageError(f"the segment lock {self.path} stayed held for "
                                   f"{timeout_s:.0f} s")
            tick()
            time.sleep(POLL_S)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)      # closing drops the flock
            self._fd = None
