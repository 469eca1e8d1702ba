"""The writing end of one shard's WAL group: the active file, rotation, preallocation, and
the disk class's periodic flush.

Files are zero-filled and fsynced before use (`wal-<idx>.log.pre`, renamed at rotation):
overwriting written extents makes each fdatasync cheaper than appending or fallocate. The next
file is prepared by a helper thread ahead of rotation; the rename and the directory fsync
happen before any frame in the new file can be acked.

The disk class's flush (an fdatasync of the tail once its oldest unsynced write is
`disk_flush_interval_ms` old) runs on a helper thread too (TailFlush), so the shard's loop
goes on answering while it lasts: on a busy disk one fdatasync took 1-50 ms, every 10 ms,
and every request of the shard waited behind it. Nobody waits for that flush (no reply
depends on it); what it made durable counts once it is done (`durable_end`), and the
active file is never closed under it (rotation and close wait for it first).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

from topics_actors.config import WAL_FILE_BYTES_DEFAULT
from topics_actors.errors import InvariantViolation, StorageError, storage_error
from topics_actors.storage import failpoint
from topics_actors.storage.fs import Fs, FsFile
from topics_actors.storage.wal_layout import PRE_SUFFIX, wal_file_name

log = logging.getLogger(__name__)

# A new WAL group's first file is this small, so that a node on an empty data dir is ready
# after zeroing 8 MiB per shard instead of 64 (about 35 ms against 300 ms here); the next
# file, full size, is prepared in the background meanwhile.
FIRST_FILE_BYTES_MAX = 8 * 1024 * 1024
_ZERO_CHUNK = bytes(1024 * 1024)


def zero_fill(handle: FsFile, start: int, end: int) -> None:
    offset = start
    while offset < end:
        n = min(len(_ZERO_CHUNK), end - offset)
        handle.write_all_at(memoryview(_ZERO_CHUNK)[:n], offset)
        offset += n


class Preallocator:
    """Prepares the next WAL file (zeroed, fsynced, named .pre) on a helper thread."""

    def __init__(self, fs: Fs, directory: str, file_bytes: int, background: bool):
        self.fs = fs
        self.directory = directory
        self.file_bytes = file_bytes
        self.background = background
        self._thread: threading.Thread | None = None
        self._ready: tuple[int, str] | None = None
        self._error: BaseException | None = None

    def _prepare(self, idx: int, size: int) -> None:
        path = os.path.join(self.directory, wal_file_name(idx) + PRE_SUFFIX)
        try:
            handle = self.fs.open(path, create=True, truncate=True)
            try:
                zero_fill(handle, 0, size)
                handle.sync_all()
            finally:
                handle.close()
            self._ready = (idx, path)
        except BaseException as exc:  # reported to the writer at rotation
            self._error = exc
            try:   # a half-made file would hold the last free blocks of a full disk
                self.fs.remove(path)
            except OSError:
                pass

    def start(self, idx: int) -> None:
        """Begin preparing file `idx` unless it is already in hand."""
        if self._thread is not None or (self._ready and self._ready[0] == idx):
            return
        self._ready, self._error = None, None
        if not self.background:
            return
        self._thread = threading.Thread(target=self._prepare, args=(idx, self.file_bytes),
                                        name=f"wal-prealloc-{idx}", daemon=True)
        self._thread.start()

    def take(self, idx: int, size: int, exact: bool = False) -> str:
        """The path of a ready .pre file for `idx` of at least `size` bytes (of exactly
        `size` when one has to be made now and `exact`)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._ready is None or self._ready[0] != idx or size > self.file_bytes:
            self._error = None
            self._prepare(idx, size if exact else max(size, self.file_bytes))
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        path = self._ready[1]
        self._ready = None
        return path

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class TailFlush:
    """One fdatasync of the active file's tail at a time, on a helper thread that lives as
    long as the writer. The writer starts a flush with the handle and the tail it covers,
    and takes the outcome (None, or the error) when `done`."""

    def __init__(self, name: str):
        self._asks: queue.SimpleQueue = queue.SimpleQueue()   # at most one in flight
        self._done = threading.Event()
        self.target: tuple[int, int, int] | None = None   # (file idx, tail, started ns)
        self.error: BaseException | None = None
        self.last_started_ns = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            handle = self._asks.get()
            if handle is None:
                return
            try:
                handle.sync_data()
                failpoint.hit("wal::after_fdatasync")
            except BaseException as exc:   # the writer latches on it (TailFlush.take)
                self.error = exc
            self._done.set()

    def start(self, handle: FsFile, idx: int, tail: int) -> None:
        if self.target is not None:
            raise InvariantViolation("a tail flush started while another is in flight")
        self.last_started_ns = time.monotonic_ns()
        self.target, self.error = (idx, tail, self.last_started_ns), None
        self._done.clear()
        self._asks.put(handle)

    @property
    def done(self) -> bool:
        return self.target is not None and self._done.is_set()

    def take(self, wait: bool) -> tuple[tuple[int, int, int], BaseException | None] | None:
        """The finished flush's (target, error), waiting for it when `wait`; None when no
        flush is in flight (or it is still running and not `wait`)."""
        if self.target is None or not (wait or self._done.is_set()):
            return None
        self._done.wait()
        target, self.target = self.target, None
        return target, self.error

    def close(self) -> None:
        self.take(wait=True)
        self._asks.put(None)
        self._thread.join()


class WalWriter:
    """Appends encoded batches to the active file of one WAL group.

    The caller owns ordering: write(), then sync() when the batch holds fsync-class frames.
    A failed write or sync is undone with undo() (zero-filled and synced) before anything is
    acked; if even that fails the writer latches and refuses every later write.
    """

    def __init__(self, fs: Fs, directory: str, file_bytes: int = WAL_FILE_BYTES_DEFAULT,
                 background_prealloc: bool = True, background_flush: bool = False):
        self.fs = fs
        self.directory = directory
        self.file_bytes = file_bytes
        self.prealloc = Preallocator(fs, directory, file_bytes, background_prealloc)
        self.handle: FsFile | None = None
        self.idx = 0
        self.tail = 0
        self.synced_tail = 0         # how far the active file is durable (fdatasync'd)
        self.capacity = 0
        self.latched: str | None = None
        self.rotation_error: str | None = None   # the last rotation failed (a full disk)
        self.dirty = False           # bytes written since the last sync
        self.dirty_since_ns = 0      # when the oldest unsynced write happened
        self.syncs = 0
        self.bytes_written = 0
        self.background_flush = background_flush
        self.flusher: TailFlush | None = None    # its thread starts with the first flush

    def open(self, last_idx: int, valid_len: int, fresh: bool = False) -> None:
        """Resume after recovery at (last file, its valid length), or start file 1. With
        `fresh`, start a new file `last_idx` instead (nothing may be written below it)."""
        self._remove_stale_pre()
        if last_idx == 0 or fresh:
            idx = max(1, last_idx)
            first = min(self.file_bytes, FIRST_FILE_BYTES_MAX) if last_idx == 0 else 0
            self._activate(idx, self.prealloc.take(idx, first or self.file_bytes, exact=True))
        else:
            path = os.path.join(self.directory, wal_file_name(last_idx))
            self.handle = self.fs.open(path)
            self.idx, self.tail = last_idx, valid_len
            self.capacity = max(self.handle.size(), valid_len)
            # After a process crash the page cache may still hold the previous incarnation's
            # unsynced tail of this file: sync it before anything new is written, or a power
            # loss could take it while later frames, synced in the next file, survive (a gap
            # in the log, and its topics quarantined: seen by tools.jepsen, issue 34).
            self.handle.sync_data()
            self.fs.sync_dir(self.directory)
            self.synced_tail = valid_len
        self.prealloc.start(self.idx + 1)

    def _remove_stale_pre(self) -> None:
        for name in self.fs.listdir(self.directory):
            if name.endswith(PRE_SUFFIX):
                self.fs.remove(os.path.join(self.directory, name))

    def _activate(self, idx: int, pre_path: str) -> None:
        path = os.path.join(self.directory, wal_file_name(idx))
        self.fs.rename(pre_path, path)
        failpoint.hit("wal::after_rotate_rename")
        self.fs.sync_dir(self.directory)
        handle = self.fs.open(path)
        if self.handle is not None:
            self.handle.close()
        self.handle, self.idx, self.tail, self.synced_tail = handle, idx, 0, 0
        self.capacity = handle.size()
        log.info("event=wal_rotated dir=%s idx=%d", self.directory, idx)

    def _rotate(self, batch_len: int) -> None:
        """Move to the next file. A failure leaves the writer on the old file, synced and
        whole, and the next write tries again: a full disk refuses writes only until space
        returns (the reference latches read-only here; docs/DURABILITY.md 5)."""
        self.settle_flush(wait=True)   # the old file is closed below: not under a flush
        if self.latched:               # that flush failed
            raise StorageError(f"WAL is read-only: {self.latched}")
        if self.dirty:
            self.sync()   # frames of the old file must not trail frames synced in the new one
        try:
            self._activate(self.idx + 1, self.prealloc.take(self.idx + 1, batch_len))
        except OSError as exc:
            if self.rotation_error is None:
                log.error("event=wal_rotation_failed dir=%s error=%r", self.directory, exc)
            self.rotation_error = repr(exc)
            raise storage_error(f"WAL rotation failed: {exc}", exc) from exc
        if self.rotation_error is not None:
            log.info("event=wal_rotation_resumed dir=%s idx=%d", self.directory, self.idx)
            self.rotation_error = None
        self.prealloc.start(self.idx + 1)

    def write(self, buf: bytes | bytearray) -> tuple[int, int]:
        """Write one batch at the tail; returns (file idx, offset of the batch)."""
        if self.latched:
            raise StorageError(f"WAL is read-only: {self.latched}")
        if self.tail + len(buf) > self.capacity and self.tail > 0:
            self._rotate(len(buf))
        elif self.tail + len(buf) > self.capacity:
            self.capacity = self.tail + len(buf)   # a lone oversized batch extends the file
        offset = self.tail
        if offset + len(buf) > self.capacity:
            raise InvariantViolation(f"a batch of {len(buf)} bytes at {offset} passes the WAL "
                                     f"file's end {self.capacity}")
        try:
            self.handle.write_all_at(buf, offset)
            failpoint.hit("wal::after_write")
        except OSError:
            self.undo(offset, len(buf))
            raise
        self.tail = offset + len(buf)
        if not self.dirty:
            self.dirty, self.dirty_since_ns = True, time.monotonic_ns()
        self.bytes_written += len(buf)
        return self.idx, offset

    def start_flush(self) -> bool:
        """Harden the dirty tail on the helper thread (synchronously without one); False
        when one is already in flight. OSError only from the synchronous sync."""
        if not self.background_flush:
            self.sync()
            return True
        if self.flusher is None:
            self.flusher = TailFlush(f"wal-flush-{os.path.basename(self.directory)}")
        self.settle_flush(wait=False)
        if self.flusher.target is not None:
            return False
        self.flusher.start(self.handle, self.idx, self.tail)
        return True

    @property
    def flushing(self) -> bool:
        return self.flusher is not None and self.flusher.target is not None

    def settle_flush(self, wait: bool) -> None:
        """Count what a finished background flush made durable (waiting for it when
        `wait`): the tail it covered is synced, and the writer is clean if nothing was
        written since; writes since then are at most as old as the flush. A failed flush
        latches the writer, as a failed synchronous flush does."""
        outcome = self.flusher.take(wait) if self.flusher is not None else None
        if outcome is None:
            return
        (idx, tail, started_ns), error = outcome
        if error is not None:
            log.error("event=background_sync_failed dir=%s error=%r", self.directory, error)
            self.latched = self.latched or f"background fdatasync failed: {error}"
            return
        self.syncs += 1
        if idx != self.idx:      # rotated meanwhile: the rotation synced that file whole
            return
        self.synced_tail = max(self.synced_tail, min(tail, self.tail))
        if self.tail == tail:
            self.dirty = False
        elif self.dirty:
            self.dirty_since_ns = max(self.dirty_since_ns, started_ns)

    def sync(self) -> None:
        self.handle.sync_data()
        failpoint.hit("wal::after_fdatasync")
        self.dirty = False
        self.synced_tail = self.tail
        self.syncs += 1

    @property
    def durable_end(self) -> tuple[int, int]:
        """(file idx, offset) up to which the log is durable: every earlier file was synced
        before its successor took writes (`_rotate`)."""
        return self.idx, self.synced_tail

    def undo(self, offset: int, length: int) -> None:
        """Erase a failed batch [offset, offset+length) so no later scan can read it back."""
        if offset > self.tail:
            raise InvariantViolation(f"erasing a batch at {offset}, past the WAL tail "
                                     f"{self.tail}: bytes before it would stay")
        self.tail = offset
        self.synced_tail = min(self.synced_tail, offset)
        try:
            zero_fill(self.handle, offset, offset + length)
            self.handle.sync_data()
            return
        except OSError as exc:
            self.latched = f"could not erase a failed batch: {exc}"
        try:   # cutting the file can work where writing does not
            self.handle.set_len(offset)
            self.handle.sync_all()
        except OSError as exc:
            self.latched += f"; truncation failed too: {exc}"
        log.error("event=wal_latched dir=%s reason=%r", self.directory, self.latched)

    def close(self) -> None:
        self.prealloc.close()
        if self.flusher is not None:
            self.settle_flush(wait=True)
            self.flusher.close()
            self.flusher = None
        if self.handle is not None:
            if self.dirty and not self.latched:
                self.sync()
            self.handle.close()
            self.handle = None
