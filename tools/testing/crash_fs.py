"""CrashFs: the Fs seam of a process that dies at a chosen call, then of a machine that loses
power (for tests; spec/storage.md 5.1).

The model is strict POSIX, like the reference server's FakeDisk:

- bytes a file gets (write_at, set_len, an open that truncates) are volatile until that
  file's sync_data or sync_all;
- a directory entry (a file created, renamed, removed; a directory made or removed) is
  volatile until sync_dir of the directory that holds it (a rename: the target's directory);
- `die_at = n` (counted in FaultFs.mutations()): mutating calls 0..n-1 run, call n raises
  CrashPoint before it does anything, and so does every later call: the process is dead;
- `power_loss(mode, rng)` then decides what the device kept:

    mode    file bytes not yet synced                         entries not yet synced
    keep    all kept (a process crash: the page cache lives)   all kept
    drop    all lost                                           all lost
    torn    per file, kept up to a random pending write, that  all kept (journaled
            one cut to a strict prefix, later ones lost        metadata, data torn)
    garble  all kept, but one byte of each file's last         all kept
            pending write flipped (a bad sector)

Undo data: every pending write remembers the bytes it replaced (read before it runs) and the
file size, through its own dup of the descriptor, so renames and unlinks do not lose track of
it; a removed or overwritten file is hard-linked into `grave` until its removal is durable.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass

from tools.testing.fault_fs import MUTATING, FaultFile, FaultFs
from topics_actors.storage import failpoint
from topics_actors.storage.fs import File, Fs

POWER_MODES = ("keep", "drop", "torn", "garble")


class CrashPoint(failpoint.Abort):
    """The process dies here: no handler of the engine may run (not an Exception)."""


@dataclass
class _Write:
    offset: int
    old: bytes            # what [offset, offset + len(new)) held (shorter at end of file)
    old_size: int
    new: bytes | None     # None: a set_len
    new_size: int


class _Dirty:
    """The pending (unsynced) writes of one inode, with a descriptor of its own."""

    def __init__(self, fd: int, path: str):
        self.fd = os.dup(fd)
        self.path = path
        self.writes: list[_Write] = []

    def undo(self, write: _Write) -> None:
        if write.new is None:
            os.ftruncate(self.fd, write.old_size)
            os.pwrite(self.fd, write.old, write.new_size)
        else:
            os.pwrite(self.fd, write.old, write.offset)
            os.ftruncate(self.fd, write.old_size)

    def close(self) -> None:
        os.close(self.fd)


class CrashFile(FaultFile):
    fs: "CrashFs"

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        view = memoryview(data)
        if self.fs._tick("write_at", self.path) == "short":
            view = view[:len(view) // 2]
        old, old_size = os.pread(self.fd, len(view), offset), os.fstat(self.fd).st_size
        n = self.inner.write_at(view, offset)
        self.fs._dirty(self).writes.append(
            _Write(offset, old[:n], old_size, bytes(view[:n]), max(old_size, offset + n)))
        return n

    write_all_at = File.write_all_at

    def set_len(self, size: int) -> None:
        self.fs._tick("set_len", self.path)
        old_size = os.fstat(self.fd).st_size
        old = os.pread(self.fd, max(0, old_size - size), size)
        self.inner.set_len(size)
        self.fs._dirty(self).writes.append(_Write(size, old, old_size, None, size))

    def sync_data(self) -> None:
        self.fs._tick("sync_data", self.path)
        if self.fs.real_sync:
            self.inner.sync_data()
        self.fs._synced(self.fd)

    def sync_all(self) -> None:
        self.fs._tick("sync_all", self.path)
        if self.fs.real_sync:
            self.inner.sync_all()
        self.fs._synced(self.fd)


class CrashFs(FaultFs):
    file_class = CrashFile

    def __init__(self, inner: Fs | None = None, grave: str | None = None,
                 real_sync: bool = False):
        super().__init__(inner)
        self.real_sync = real_sync      # the model decides what a sync keeps; the device
                                        # need not really sync (much faster tests)
        self.die_at: int | None = None
        self.trace: list[tuple[str, int]] | None = None    # (op, index in its class)
        self.dead = False
        self.grave = grave or tempfile.mkdtemp(prefix="crashfs-grave-")
        os.makedirs(self.grave, exist_ok=True)
        self._files: dict[tuple[int, int], _Dirty] = {}
        self._names: list[tuple[str, tuple]] = []     # (directory, how to undo), in order
        self._buried = 0

    # --- dying ----------------------------------------------------------------------------

    def _tick(self, op: str, what: str = "") -> str | None:
        if self.dead or (op in MUTATING and self.die_at is not None
                         and self.mutations() >= self.die_at):
            self.dead = True
            raise CrashPoint(f"{op} {what}")
        if self.trace is not None and op in MUTATING:
            self.trace.append((op, self.counts[op]))
        return super()._tick(op, what)

    def dirty_paths(self) -> set[str]:
        """Paths of files holding bytes that a power loss could still take away."""
        return {d.path for d in self._files.values() if d.writes}

    def unsynced_entries(self) -> list[str]:
        return [f"{kind} {args[0]}" for _, (kind, *args) in self._names]

    def power_loss(self, mode: str, rng: random.Random) -> None:
        """What the device kept (see the module docstring); then a fresh, live device."""
        if mode not in POWER_MODES:
            raise ValueError(f"unknown power-loss mode {mode!r}")
        for dirty in self._files.values():
            writes = dirty.writes
            if writes and mode == "drop":
                for write in reversed(writes):
                    dirty.undo(write)
            elif writes and mode == "torn":
                cut = rng.randrange(len(writes))
                for write in reversed(writes[cut:]):
                    dirty.undo(write)
                kept = writes[cut].new
                if kept:
                    os.pwrite(dirty.fd, kept[:rng.randrange(len(kept))], writes[cut].offset)
            elif writes and mode == "garble" and writes[-1].new:
                last = writes[-1]
                at = last.offset + rng.randrange(len(last.new))
                os.pwrite(dirty.fd, bytes([last.new[at - last.offset] ^ 0xFF]), at)
            dirty.close()
        if mode == "drop":
            for _, undo in reversed(self._names):
                _undo_entry(*undo)
        self._files.clear()
        self._names.clear()
        shutil.rmtree(self.grave, ignore_errors=True)
        os.makedirs(self.grave)
        self.die_at, self.dead = None, False

    # --- bookkeeping ----------------------------------------------------------------------

    def _dirty(self, handle: CrashFile) -> _Dirty:
        st = os.fstat(handle.fd)
        key = (st.st_dev, st.st_ino)
        dirty = self._files.get(key)
        if dirty is None:
            dirty = self._files[key] = _Dirty(handle.fd, handle.path)
        return dirty

    def _synced(self, fd: int) -> None:
        st = os.fstat(fd)
        dirty = self._files.pop((st.st_dev, st.st_ino), None)
        if dirty is not None:
            dirty.close()

    def _bury(self, path: str) -> str:
        """Keep the file at `path` reachable (a hard link, a copy across devices)."""
        self._buried += 1
        grave = os.path.join(self.grave, str(self._buried))
        try:
            os.link(path, grave)
        except FileNotFoundError:
            raise                       # what the removal itself would have said
        except OSError:
            shutil.copyfile(path, grave)
        return grave

    def _entry(self, path: str, *undo) -> None:
        self._names.append((os.path.dirname(os.path.abspath(path)), undo))

    # --- the mutating calls of the seam ---------------------------------------------------

    def open(self, path: str, create: bool = False, truncate: bool = False) -> CrashFile:
        existed = os.path.exists(path)
        old = b""
        if existed and truncate:
            with open(path, "rb") as handle:
                old = handle.read()
        handle = super().open(path, create, truncate)
        if not existed:
            self._entry(path, "created", path)
        elif old:
            self._dirty(handle).writes.append(_Write(0, old, len(old), None, 0))
        return handle

    def rename(self, src: str, dst: str) -> None:
        self._tick("rename", src)
        grave = self._bury(dst) if os.path.isfile(dst) else None
        self.inner.rename(src, dst)
        self._entry(dst, "renamed", dst, src, grave)

    def remove(self, path: str) -> None:
        self._tick("remove", path)
        grave = self._bury(path)
        self.inner.remove(path)
        self._entry(path, "removed", path, grave)

    def makedirs(self, path: str) -> None:
        self._tick("makedirs", path)
        missing, probe = [], os.path.abspath(path)
        while not os.path.exists(probe):
            missing.append(probe)
            probe = os.path.dirname(probe)
        self.inner.makedirs(path)
        for directory in reversed(missing):
            self._entry(directory, "made", directory)

    def rmdir(self, path: str) -> None:
        self._tick("rmdir", path)
        self.inner.rmdir(path)
        self._entry(path, "unmade", path)

    def sync_dir(self, path: str) -> None:
        self._tick("sync_dir", path)
        if self.real_sync:
            self.inner.sync_dir(path)
        directory = os.path.abspath(path)
        self._names = [entry for entry in self._names if entry[0] != directory]


def _undo_entry(kind: str, path: str, *args) -> None:
    try:
        if kind == "created":
            os.unlink(path)
        elif kind == "renamed":
            src, grave = args
            os.rename(path, src)
            if grave:
                os.link(grave, path)
        elif kind == "removed":
            os.link(args[0], path)
        elif kind == "made":
            shutil.rmtree(path)
        elif kind == "unmade":
            os.makedirs(path)
    except (FileNotFoundError, FileExistsError):
        pass   # a later entry's undo (or an undone parent) already settled it
