"""A small file system for a node's data dir, and a ballast that fills it.

SmallDisk makes a sparse image file, formats it ext4 (no blocks reserved for root) and
loop-mounts it, so the engine meets a real ENOSPC: at write() (ext4 reserves blocks at
delayed allocation), at fallocate, at file creation. `fill()` takes every free block with a
ballast file beside the node's data dir, `free()` removes it: space returns with no
restart. Needs root, losetup and mkfs.ext4 (util-linux, e2fsprogs).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

COMMAND_TIMEOUT_S = 30
BALLAST = "ballast"
_CHUNK = bytes(64 * 1024)


def usable() -> str | None:
    if os.geteuid() != 0:
        return "mounting a loop device needs root"
    missing = [tool for tool in ("losetup", "mkfs.ext4", "mount", "umount")
               if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


class SmallDisk:
    def __init__(self, image: str, mount_dir: str, size_mib: int = 256):
        self.image = os.path.abspath(image)
        self.mount_dir = os.path.abspath(mount_dir)
        self.size_mib = size_mib
        self.mounted = False
        self.fills = 0

    @property
    def ballast(self) -> str:
        return os.path.join(self.mount_dir, BALLAST)

    def mount(self) -> "SmallDisk":
        reason = usable()
        if reason:
            raise RuntimeError(reason)
        os.makedirs(self.mount_dir, exist_ok=True)
        with open(self.image, "wb") as image:
            image.truncate(self.size_mib * 1024 * 1024)
        _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", self.image])
        _run(["mount", "-o", "loop", self.image, self.mount_dir])
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        stat = os.statvfs(self.mount_dir)
        return stat.f_bavail * stat.f_frsize

    def fill(self, leave_bytes: int = 0) -> int:
        """Take all free space but `leave_bytes` with the ballast (fallocate, then writes
        until ENOSPC, since fallocate leaves blocks the writes can still take); the bytes
        the ballast holds."""
        handle = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            want = self.free_bytes() - leave_bytes
            if want > 0:
                try:
                    os.posix_fallocate(handle, os.fstat(handle).st_size, want)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
            while not leave_bytes and self.free_bytes() > 0:
                try:
                    os.write(handle, _CHUNK)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    break
            os.fsync(handle)
            self.fills += 1
            return os.fstat(handle).st_size
        finally:
            os.close(handle)

    def free(self) -> None:
        if os.path.exists(self.ballast):
            os.unlink(self.ballast)

    def unmount(self) -> None:
        """Unmount (lazily, if a process still holds it) and delete the image."""
        if self.mounted:
            subprocess.run(["umount", self.mount_dir], capture_output=True,
                           timeout=COMMAND_TIMEOUT_S)
            if os.path.ismount(self.mount_dir):
                subprocess.run(["umount", "-l", self.mount_dir], capture_output=True,
                               timeout=COMMAND_TIMEOUT_S)
            self.mounted = False
        if os.path.exists(self.image):
            os.unlink(self.image)

    def __enter__(self) -> "SmallDisk":
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()
