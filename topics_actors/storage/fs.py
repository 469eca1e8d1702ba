"""The Fs seam: every persistence call of the engine goes through an Fs and its files.

`Fs` and `FsFile` are the protocols the engine codes against: a function that touches the
disk takes an `Fs`. Production constructs `RealFs` (plain POSIX calls). Tests pass wrappers
from tools/testing (FaultFs injects EIO, ENOSPC and short writes at a chosen call; CrashFs
dies at one, then loses power), so every call site of the seam is a fault site.
"""

from __future__ import annotations

import mmap
import os
from typing import Protocol, runtime_checkable


# runtime_checkable: a unit test holds RealFs and the wrappers of tools/testing to both.
@runtime_checkable
class FsFile(Protocol):
    """An open file addressed by offset, as the engine uses it."""

    @property
    def path(self) -> str: ...

    @property
    def fd(self) -> int: ...

    def write_at(self, data: bytes | memoryview, offset: int) -> int: ...

    def write_all_at(self, data: bytes | memoryview, offset: int) -> None:
        """Every byte written, short writes retried; a write without progress raises."""

    def read_at(self, size: int, offset: int) -> bytes: ...

    def sync_data(self) -> None: ...

    def sync_all(self) -> None: ...

    def set_len(self, size: int) -> None: ...

    def size(self) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class Fs(Protocol):
    """The file system calls the engine makes (RealFs; FaultFs and CrashFs in tools/testing)."""

    def open(self, path: str, create: bool = False, truncate: bool = False) -> FsFile: ...

    def open_read(self, path: str) -> FsFile: ...

    def map_read(self, path: str) -> mmap.mmap | bytes:
        """A read-only view of a whole file (b"" for an empty one)."""

    def rename(self, src: str, dst: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]:
        """The names in `path`, sorted."""

    def rmdir(self, path: str) -> None: ...

    def makedirs(self, path: str) -> None:
        """Create `path` and its missing parents; an existing directory is fine."""

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int: ...

    def sync_dir(self, path: str) -> None:
        """Make the entries of directory `path` (creates, renames, removes) durable."""


class File:
    """An open file addressed by offset (no shared file position)."""

    def __init__(self, path: str, fd: int):
        self.path = path
        self.fd = fd

    def write_at(self, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(self.fd, data, offset)

    def write_all_at(self, data: bytes | memoryview, offset: int) -> None:
        """Write every byte, looping over short writes; no progress is an error."""
        view = memoryview(data)
        while view:
            n = self.write_at(view, offset)
            if n <= 0:
                raise OSError(5, "write made no progress", self.path)
            view = view[n:]
            offset += n

    def read_at(self, size: int, offset: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def sync_data(self) -> None:
        os.fdatasync(self.fd)

    def sync_all(self) -> None:
        os.fsync(self.fd)

    def set_len(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class RealFs:
    """Plain POSIX calls."""

    file_class = File

    def open(self, path: str, create: bool = False, truncate: bool = False) -> File:
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        return self.file_class(path, os.open(path, flags, 0o644))

    def open_read(self, path: str) -> File:
        return self.file_class(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def map_read(self, path: str) -> mmap.mmap | bytes:
        """A read-only view of a whole file served from the page cache."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return b""
            return mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
