"""The WAL files a shard reads and writes: its own group (written through the WalWriter),
retired groups it still serves records from, their numbers in the FileTable, and how far
the newest snapshot it took in has absorbed them.

A record's location names a file by number (storage/file_table.py); own files are also
known by their index in the group, retired ones by path. The layout generation and the
snapshot positions decide which files recovery reads and which may be removed.
"""

from __future__ import annotations

import logging
import os
import time

from topics_actors.config import ShardOptions
from topics_actors.errors import InvariantViolation
from topics_actors.shard.shard_stats import ShardStats
from topics_actors.storage import failpoint
from topics_actors.storage.file_table import FileTable
from topics_actors.storage.fs import Fs
from topics_actors.storage.wal_layout import group_dir, list_wal_files, shard_key, wal_file_name
from topics_actors.storage.wal_writer import WalWriter

log = logging.getLogger(__name__)
FLUSH_LOOK_MS = 1.0     # how often the loop looks at a flush running on the helper thread


class WalFileSet:
    def __init__(self, fs: Fs, options: ShardOptions, stats: ShardStats):
        self.fs = fs
        self.shard = options.shard
        self.stats = stats
        self.files = FileTable(fs)
        self.wal_dir = group_dir(options.data_dir, options.shard)
        self.writer = WalWriter(fs, self.wal_dir, options.wal_file_bytes,
                                options.background_prealloc, options.background_flush)
        self._flush_began_ns = 0
        self.own: dict[int, int] = {}          # own WAL file idx -> file number
        self.retired: dict[int, str] = {}      # file number -> path (retired groups)
        self.generation = 1                    # WAL layout generation (set by recovery)
        self.snapshot_id = 0                   # the newest snapshot taken in
        self.kept_checkpoint_idx = 0           # own WAL files below this one may be deleted

    @property
    def group_key(self) -> str:
        """The canonical key of this shard's own WAL group."""
        return shard_key(self.generation, self.shard)

    def file_no_for(self, idx: int) -> int:
        file_no = self.own.get(idx)
        if file_no is None:
            path = os.path.join(self.wal_dir, wal_file_name(idx))
            file_no = self.own[idx] = self.files.add_path(path)
        return file_no

    def add_replayed(self, path: str, view, own: bool, idx: int) -> int:
        """Register a file recovery reads (mapped as `view`); its file number."""
        file_no = self.files.add_path(path, view)
        if own:
            self.own[idx] = file_no
        else:
            self.retired[file_no] = path
        return file_no

    def wal_file_nos(self) -> set[int]:
        return set(self.own.values()) | set(self.retired)

    # --- writing ------------------------------------------------------------------------

    def append(self, buf: bytearray, sync: bool, info) -> None:
        """Write one batch at the tail (and fdatasync it when `sync`), filling `info` with
        where it went and how long it took. A failed sync erases the batch again."""
        writer = self.writer
        before = (writer.idx, writer.tail)
        t0 = time.perf_counter_ns()
        idx, offset = writer.write(buf)
        if (idx, offset) != before and (idx, offset) != (before[0] + 1, 0):
            raise InvariantViolation(f"shard {self.shard}: a batch landed at {(idx, offset)}, "
                                     f"the tail was {before}")
        info.file_no, info.idx, info.offset = self.file_no_for(idx), idx, offset
        info.end = offset + len(buf)
        t1 = time.perf_counter_ns()
        info.wal_ms = (t1 - t0) / 1e6
        if sync:
            try:
                writer.sync()
            except OSError:
                writer.undo(offset, len(buf))
                raise
            synced_ns = time.perf_counter_ns() - t1
            info.fsync_ms = synced_ns / 1e6
            self.stats.syncs += 1
            self.stats.observe_fsync(synced_ns)
        self.stats.batches += 1
        self.stats.bytes_written += len(buf)
        self.stats.rotations += idx != before[0]

    def ms_until_flush(self, interval_ms: int) -> float | None:
        """How long until an unsynced tail is due for its flush (while one runs on the
        helper thread: a look at it every millisecond); None when all is synced."""
        writer = self.writer
        if writer.flushing:
            return FLUSH_LOOK_MS
        if not writer.dirty:
            return None
        return max(0.0, interval_ms - (time.monotonic_ns() - writer.dirty_since_ns) / 1e6)

    def flush_due(self, interval_ms: int) -> bool:
        """Harden an unsynced tail once it is `interval_ms` old (the disk class's bounded
        loss window), on the writer's helper thread when it has one; whether a flush was
        started (or, without the thread, attempted)."""
        writer = self.writer
        if writer.flushing:
            writer.settle_flush(wait=False)
            if writer.flushing:
                return False
            self._count_flush()
        if not writer.dirty or writer.latched:
            return False
        if (time.monotonic_ns() - writer.dirty_since_ns) / 1e6 < interval_ms:
            return False
        self._flush_began_ns = time.perf_counter_ns()
        try:
            writer.start_flush()
        except OSError as exc:
            log.error("event=background_sync_failed shard=%d error=%r", self.shard, exc)
            writer.latched = f"background fdatasync failed: {exc}"
            return True
        if not writer.flushing:
            self._count_flush()
        return True

    def _count_flush(self) -> None:
        self.stats.syncs += 1
        self.stats.observe_fsync(time.perf_counter_ns() - self._flush_began_ns)

    # --- after a snapshot ---------------------------------------------------------------

    def forget_absorbed(self, checkpoint_idx: int, lowest_referenced: int) -> bool:
        """Stop serving retired files and own files below `checkpoint_idx` that no record
        location still names (`lowest_referenced` = the lowest file number still named).
        False, with nothing of the own group forgotten, if one still is."""
        for file_no in [n for n in self.retired if n < lowest_referenced]:
            self.files.remove(file_no)       # the compactor removes retired groups
            del self.retired[file_no]
        for idx, file_no in sorted(self.own.items()):
            if idx >= checkpoint_idx:
                break
            if file_no >= lowest_referenced:
                log.error("event=absorbed_file_still_referenced shard=%d idx=%d",
                          self.shard, idx)
                return False
            self.files.remove(file_no)
            del self.own[idx]
        return True

    def remove_below(self, idx_limit: int) -> int:
        """Delete own WAL files below `idx_limit`; how many went."""
        failpoint.hit("absorb::before_wal_remove")
        removed = 0
        for idx, path in list_wal_files(self.fs, self.wal_dir):
            if idx >= idx_limit:
                break
            try:
                self.fs.remove(path)
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:   # the next snapshot taken in tries again
                log.error("event=wal_remove_failed path=%s error=%r", path, exc)
                break
        return removed

    def close(self) -> None:
        self.writer.close()
        self.files.close()
