"""A node's data dir on LazyFS, the FUSE file system Jepsen uses for power loss: writes
that were not fsynced stay in LazyFS's own cache, and `power_loss()` drops them, as a
machine losing power drops its page cache (kill -9 keeps them: the kernel still has them).

LazyFS is built, never committed, by tools/install_lazyfs.sh (called by
tools/install_services.sh) from the offline recipe in ../shared/vendor/lazyfs/; the binary
is found at $TOPICS_LAZYFS_BIN or ~/.cache/lazyfs/lazyfs. Mounting needs root and
/dev/fuse. What LazyFS models and what it does not (docs/FAULT_TESTING.md "Power loss"):
file data and sizes not fsynced (fsync and fdatasync count, sync(2) does not) are lost;
directory entries (create, rename, unlink) reach the backing directory at once, so a
missing directory fsync cannot show here (CrashFs covers that in-process).

The cache does not evict (LazyFS's eviction path crashes it on a truncate, `map::at`):
pages stay until their file is deleted or a power loss clears them, and a write that finds
the cache full goes straight to the backing file, where a power loss cannot drop it. So the
cache is sized above what a run keeps, and `cache_usage()` says how full it is: a power
loss with a full cache proves nothing, and the callers refuse it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from tools.testing.node_harness import wait_for

CACHE_SIZE_DEFAULT = "128mb"
MOUNT_TIMEOUT_S = 10
CLEAR_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10
_REPORT = "total number of bytes un-fsynced"
_USAGE = "cache usage (%pages) is"


def lazyfs_binary() -> str | None:
    """The LazyFS binary the set-up built, or None."""
    path = os.environ.get("TOPICS_LAZYFS_BIN") or os.path.expanduser("~/.cache/lazyfs/lazyfs")
    return path if os.access(path, os.X_OK) else None


def lazyfs_usable() -> str | None:
    """Why LazyFS cannot be mounted here (None: it can)."""
    if lazyfs_binary() is None:
        return "LazyFS is not built (tools/install_lazyfs.sh)"
    if os.geteuid() != 0:
        return "mounting LazyFS needs root"
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return "no /dev/fuse or fusermount3 (Debian package fuse3)"
    return None


def _control_dir() -> str:
    """A private dir for the config and FIFOs. LazyFS ignores a --config-path holding
    '-o' anywhere (pytest's /tmp/pytest-of-root does), so such a TMPDIR is not used."""
    base = tempfile.gettempdir()
    if "-o" in base.lower():
        base = "/tmp"
    return tempfile.mkdtemp(prefix="lazyfs_", dir=base)


class LazyFsMount:
    """LazyFS over `root` (the backing dir, which keeps what was synced) at `mount_dir`."""

    def __init__(self, root: str, mount_dir: str, cache_size: str = CACHE_SIZE_DEFAULT):
        self.root = os.path.abspath(root)
        self.mount_dir = os.path.abspath(mount_dir)
        self.cache_size = cache_size
        self.control = ""
        self.proc: subprocess.Popen | None = None
        self.done_fd = -1            # held open: LazyFS's fault thread waits for a reader
        self.power_losses = 0

    @property
    def fifo(self) -> str:
        return os.path.join(self.control, "faults.fifo")

    def mount(self) -> "LazyFsMount":
        reason = lazyfs_usable()
        if reason:
            raise RuntimeError(reason)
        os.makedirs(self.root, exist_ok=True)
        os.makedirs(self.mount_dir, exist_ok=True)
        self.control = _control_dir()
        config = os.path.join(self.control, "lazyfs.toml")
        with open(config, "w") as out:
            out.write(f'[faults]\nfifo_path="{self.fifo}"\n'
                      f'fifo_path_completed="{self.fifo}.done"\n'
                      f'[cache]\napply_eviction=false\n[cache.simple]\n'
                      f'custom_size="{self.cache_size}"\nblocks_per_page=1\n'
                      f'[filesystem]\nlog_all_operations=false\nlogfile=""\n')
        log = open(os.path.join(self.control, "lazyfs.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [lazyfs_binary(), self.mount_dir, "--config-path", config, "-o", "allow_other",
                 "-o", "modules=subdir", "-o", f"subdir={self.root}", "-f"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            log.close()
        try:
            wait_for(lambda: self.mounted() or self.proc.poll() is not None,
                     MOUNT_TIMEOUT_S, f"LazyFS at {self.mount_dir}", 0.05)
            if not self.mounted():
                raise RuntimeError(f"LazyFS exited with {self.proc.returncode}: {self.log()}")
            wait_for(lambda: os.path.exists(self.fifo + ".done"), MOUNT_TIMEOUT_S,
                     "its fault FIFOs")
            self.done_fd = os.open(self.fifo + ".done", os.O_RDWR | os.O_NONBLOCK)
            wait_for(lambda: "waiting for fault commands" in self.log(), MOUNT_TIMEOUT_S,
                     "its fault thread")
        except BaseException:
            self.unmount()
            raise
        return self

    def node_data_dir(self, run_dir: str) -> str:
        """A node's data dir on this mount. A Unix socket cannot live on LazyFS (no
        mknod), so the node's `run` dir (its ipc sockets) is a symlink to `run_dir`."""
        data = os.path.join(self.mount_dir, "data")
        os.makedirs(data, exist_ok=True)
        os.makedirs(run_dir, exist_ok=True)
        os.symlink(os.path.abspath(run_dir), os.path.join(data, "run"))
        return data

    def mounted(self) -> bool:
        with open("/proc/mounts") as mounts:
            return any(line.split()[1] == self.mount_dir and line.split()[2].startswith("fuse")
                       for line in mounts)

    def power_loss(self) -> None:
        """Drop every byte not fsynced. The caller has killed every process writing here
        (a power loss stops them all at once); the files read back as the disk kept them."""
        self._command(b"lazyfs::clear-cache")
        deadline, answer = time.monotonic() + CLEAR_TIMEOUT_S, b""
        while b"finished::clear-cache" not in answer:
            if time.monotonic() > deadline:
                raise RuntimeError(f"LazyFS did not clear its cache: {self.log()[-500:]}")
            try:
                answer += os.read(self.done_fd, 256)
            except BlockingIOError:
                time.sleep(0.01)
        self.power_losses += 1

    def unsynced_bytes(self) -> int:
        """How many bytes LazyFS holds that were not fsynced (its own report)."""
        seen = self.log().count(_REPORT)
        self._command(b"lazyfs::unsynced-data-report")
        wait_for(lambda: self.log().count(_REPORT) > seen, CLEAR_TIMEOUT_S,
                 "the unsynced-data report")
        line = [line for line in self.log().splitlines() if _REPORT in line][-1]
        return int(line.split(_REPORT)[1].strip(": ").split()[0])

    def cache_usage(self) -> float:
        """The share of the cache's pages in use, in percent (LazyFS's own report)."""
        seen = self.log().count(_USAGE)
        self._command(b"lazyfs::display-cache-usage")
        wait_for(lambda: self.log().count(_USAGE) > seen, CLEAR_TIMEOUT_S, "the cache usage")
        line = [line for line in self.log().splitlines() if _USAGE in line][-1]
        return float(line.split(_USAGE)[1].strip().rstrip("%"))

    def _command(self, command: bytes) -> None:
        """One command per write: LazyFS takes one read() as one command. Its fault thread
        holds the FIFO open, so this never blocks."""
        writer = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(writer, command + b"\n")
        finally:
            os.close(writer)

    def log(self) -> str:
        try:
            with open(os.path.join(self.control, "lazyfs.log"), "rb") as handle:
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def unmount(self) -> None:
        """Unmount and stop LazyFS (by its own pid); safe to call twice. Unsynced data is
        dropped, as at a power loss: call power_loss() first only to count it."""
        if self.mounted():
            subprocess.run(["fusermount3", "-u", "-z", self.mount_dir], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if self.proc is not None:
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
            self.proc = None
        if self.done_fd >= 0:
            os.close(self.done_fd)
            self.done_fd = -1
        if self.control:
            shutil.rmtree(self.control, ignore_errors=True)
            self.control = ""

    def __enter__(self) -> "LazyFsMount":
        return self.mount()

    def __exit__(self, *exc) -> None:
        self.unmount()
