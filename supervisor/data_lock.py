"""The advisory lock that keeps a second server off a data dir."""

from __future__ import annotations

import fcntl
import os

from topics_actors.errors import DataDirLocked

LOCK_NAME = ".topics.lock"


class DataDirLock:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, LOCK_NAME)
        self.fd = -1

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            where = os.path.dirname(self.path)
            raise DataDirLocked(f"data dir {where!r} is in use by another topics server "
                                f"({holder or 'unknown pid'}); stop it first") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
