"""FaultFs: the Fs seam (topics_actors/storage/fs.py) with injectable faults, for tests.

FaultFs wraps an Fs (a RealFs by default) and hands out FaultFile objects; both count every
call per op class (`counts`), including the mutating ones, so a test can assert how many
writes or syncs happened. A fault is armed on an op class and fires at its N-th call
(0-based, counted globally over all files of this FaultFs), either `once` (only call N) or
`always` (call N and every later call):

    op class    where                 kinds
    write_at    FaultFile.write_at    eio, enospc, short (writes and returns half: len // 2)
    sync_data   FaultFile.sync_data   eio, enospc
    sync_all    FaultFile.sync_all    eio, enospc
    set_len     FaultFile.set_len     eio, enospc
    open        FaultFs.open          eio, enospc     (open_read/map_read are separate ops)
    rename      FaultFs.rename        eio, enospc
    remove      FaultFs.remove        eio, enospc
    rmdir       FaultFs.rmdir         eio, enospc
    sync_dir    FaultFs.sync_dir      eio, enospc
    (any other method name of the seam can be armed too: makedirs, listdir, map_read, ...)

An error fault raises OSError(EIO|ENOSPC) *without* performing the call. A short write
writes the first half of the buffer and returns its length, so File.write_all_at loops;
an `always` short write ends in a zero-byte write, which write_all_at reports as an error.
Faults are recorded in `fired` as (op, call index, kind).

    fs = FaultFs()
    fs.fail("sync_data")                      # the next fdatasync raises EIO, once
    fs.fail("write_at", at=3, kind="enospc", always=True)
"""

from __future__ import annotations

import errno
import threading
from collections import Counter
from dataclasses import dataclass

from topics_actors.storage.fs import File, Fs, FsFile, RealFs

KINDS = {"eio": errno.EIO, "enospc": errno.ENOSPC, "short": None}
MUTATING = ("write_at", "sync_data", "sync_all", "set_len", "open", "rename", "remove",
            "sync_dir", "makedirs", "rmdir")


@dataclass
class Fault:
    op: str
    at: int
    kind: str = "eio"
    always: bool = False

    def matches(self, op: str, n: int) -> bool:
        return op == self.op and (n >= self.at if self.always else n == self.at)


class FaultFs:
    file_class: type = None   # FaultFile (set below); a subclass may hand out its own files

    def __init__(self, inner: Fs | None = None):
        self.inner = inner or RealFs()
        self.counts: Counter[str] = Counter()
        self.faults: list[Fault] = []
        self.fired: list[tuple[str, int, str]] = []
        self._lock = threading.Lock()

    # --- arming -------------------------------------------------------------------------

    def fail(self, op: str, at: int | None = None, kind: str = "eio",
             always: bool = False) -> Fault:
        """Arm a fault at call `at` of `op` (default: the next call)."""
        if kind not in KINDS or (kind == "short" and op != "write_at"):
            raise ValueError(f"bad fault kind {kind!r} for {op!r}")
        fault = Fault(op, self.counts[op] if at is None else at, kind, always)
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults.clear()

    def count(self, op: str) -> int:
        return self.counts[op]

    def mutations(self) -> int:
        return sum(self.counts[op] for op in MUTATING)

    def _tick(self, op: str, what: str = "") -> str | None:
        """Count a call; raise an injected error or return 'short' if one is due."""
        with self._lock:
            n = self.counts[op]
            self.counts[op] += 1
            fault = next((f for f in self.faults if f.matches(op, n)), None)
            if fault is None:
                return None
            self.fired.append((op, n, fault.kind))
        if fault.kind == "short":
            return "short"
        code = KINDS[fault.kind]
        raise OSError(code, f"injected {fault.kind} at {op} #{n}", what or None)

    # --- the Fs interface -----------------------------------------------------------------

    def open(self, path: str, create: bool = False, truncate: bool = False) -> "FaultFile":
        self._tick("open", path)
        return self.file_class(self, self.inner.open(path, create, truncate))

    def open_read(self, path: str) -> "FaultFile":
        self._tick("open_read", path)
        return self.file_class(self, self.inner.open_read(path))

    def map_read(self, path: str):
        self._tick("map_read", path)
        return self.inner.map_read(path)

    def rename(self, src: str, dst: str) -> None:
        self._tick("rename", src)
        self.inner.rename(src, dst)

    def remove(self, path: str) -> None:
        self._tick("remove", path)
        self.inner.remove(path)

    def rmdir(self, path: str) -> None:
        self._tick("rmdir", path)
        self.inner.rmdir(path)

    def listdir(self, path: str) -> list[str]:
        self._tick("listdir", path)
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self._tick("makedirs", path)
        self.inner.makedirs(path)

    def exists(self, path: str) -> bool:
        self._tick("exists", path)
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        self._tick("is_dir", path)
        return self.inner.is_dir(path)

    def file_size(self, path: str) -> int:
        self._tick("file_size", path)
        return self.inner.file_size(path)

    def sync_dir(self, path: str) -> None:
        self._tick("sync_dir", path)
        self.inner.sync_dir(path)


class FaultFile:
    """An inner File whose calls are counted and may fail."""

    def __init__(self, fs: FaultFs, inner: FsFile):
        self.fs = fs
        self.inner = inner
        self.path = inner.path

    @property
    def fd(self) -> int:
        return self.inner.fd

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        if self.fs._tick("write_at", self.path) == "short":
            return self.inner.write_at(memoryview(data)[:len(data) // 2], offset)
        return self.inner.write_at(data, offset)

    write_all_at = File.write_all_at   # loops over self.write_at, so short writes count

    def read_at(self, size: int, offset: int) -> bytes:
        self.fs._tick("read_at", self.path)
        return self.inner.read_at(size, offset)

    def sync_data(self) -> None:
        self.fs._tick("sync_data", self.path)
        self.inner.sync_data()

    def sync_all(self) -> None:
        self.fs._tick("sync_all", self.path)
        self.inner.sync_all()

    def set_len(self, size: int) -> None:
        self.fs._tick("set_len", self.path)
        self.inner.set_len(size)

    def size(self) -> int:
        return self.inner.size()

    def close(self) -> None:
        self.inner.close()


FaultFs.file_class = FaultFile
