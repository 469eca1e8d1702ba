"""The reclaimer's care of segment files: the sweep and the cold tier.

Each pass, holding the segment lock (so no checkpoint is between creating a file and listing
it): unlink segment files no kept snapshot lists, in both tiers (segment_sweep). Then, when
`TOPICS_COLD_DIR` is set, move every topic's sealed segments older than its newest
`hot_retain_segments` to the cold tier, and with `hot_retain_bytes` also those older than
the newest that fit in that many bytes (the stricter bound wins, cold_count):

1. copy .data and .idx to the cold tier without the lock (tmp, fsync, rename, fsync dir):
   sealed files change only by del-byte flips, which the compactor makes under the lock;
2. take the lock; copy onto the cold .data every del byte the hot one has that it lacks
   (flips made during the copy), fsync;
3. unlink the hot .data then .idx, fsync the directory; release the lock.

Readers look hot first, then cold, and the copies are equal from step 2 on, so a crash at any
step leaves a segment readable in at least one tier, and the next pass finishes the move.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from topics_actors.storage import failpoint, segment_sweep, snapshot
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import (
    DEL_LIVE, data_path, idx_entry, idx_path, topic_dir,
)
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 1 << 20
LOCK_WAIT_S = 120.0      # a checkpoint of a large backlog holds the lock for seconds


def cold_count(data_lens: list[int], retain_segments: int, retain_bytes: int) -> int:
    """How many of a topic's sealed segments (oldest first, by their .data bytes) belong in
    the cold tier: all but the newest `retain_segments`, and, when `retain_bytes` > 0, all
    but the newest whose bytes together fit in it (the original's rule)."""
    cold = max(0, len(data_lens) - retain_segments)
    if retain_bytes > 0:
        kept, fit = 0, len(data_lens)
        while fit > 0 and kept + data_lens[fit - 1] <= retain_bytes:
            kept += data_lens[fit - 1]
            fit -= 1
        cold = max(cold, fit)
    return cold


class SegmentUpkeep:
    def __init__(self, fs: Fs, tiers: Tiers, lock: SegmentLock, hot_retain_segments: int,
                 hot_retain_bytes: int = 0):
        self.fs = fs
        self.tiers = tiers
        self.lock = lock
        self.hot_retain_segments = hot_retain_segments
        self.hot_retain_bytes = hot_retain_bytes
        self.settled_ids: list[int] | None = None   # snapshots on disk at the last full pass

    def run(self, tick: Callable[[], None] = lambda: None) -> dict:
        """One pass; returns {"removed": files, "relocated": segments}. Without a new
        snapshot since the last full pass there is nothing new to remove or move, so the
        pass decodes nothing (a crashed checkpoint's files wait for the next snapshot)."""
        ids = [snap_id for snap_id, _ in snapshot.list_snapshots(self.fs, self.tiers.data_dir)]
        if ids == self.settled_ids:
            return {"removed": 0, "relocated": 0}
        swept = self._sweep()
        if swept is None:   # a checkpoint holds the lock, or a snapshot is unreadable
            return {"removed": 0, "relocated": 0}
        removed, newest = swept
        relocated = 0
        if self.tiers.cold_dir is not None and newest is not None:
            for hot_dir, first, count in self.candidates(newest):
                self.relocate(hot_dir, first, count, tick)
                relocated += 1
        self.settled_ids = ids
        return {"removed": removed, "relocated": relocated}

    def sweep(self) -> int:
        swept = self._sweep()
        return swept[0] if swept is not None else 0

    def _sweep(self) -> tuple[int, dict | None] | None:
        """Under the lock (the snapshots are read there too, so no checkpoint lists a file
        after they were read): remove what no snapshot lists. Returns (files removed, the
        newest snapshot), or None when nothing could be decided."""
        if not self.lock.try_acquire():
            return None
        try:
            bodies = segment_sweep.snapshot_bodies(self.fs, self.tiers.data_dir)
            if bodies is None:
                return None
            keep = segment_sweep.kept_segments(bodies)
            return (segment_sweep.sweep(self.fs, self.tiers, keep),
                    bodies[0] if bodies else None)
        finally:
            self.lock.release()

    def candidates(self, newest: dict) -> list[tuple[str, int, int]]:
        """(hot topic dir, first seq, count) of the sealed segments the newest snapshot
        lists that should be cold and still have a file in the hot tier (the .idx goes
        last, so a move that crashed between its unlinks is found again)."""
        out = []
        for entry in newest["topics"]:
            sealed = entry["segments"][:-1] if entry["open"] else entry["segments"]
            old = sealed[:cold_count([s[2] for s in sealed], self.hot_retain_segments,
                                     self.hot_retain_bytes)]
            hot_dir = topic_dir(self.tiers.data_dir, entry["dir"])
            out += [(hot_dir, first, count) for first, count, _ in old
                    if self.fs.exists(idx_path(hot_dir, first))]
        return out

    def relocate(self, hot_dir: str, first: int, count: int, tick: Callable[[], None]) -> None:
        cold_dir = self.tiers.cold_of(hot_dir)
        had_data = self.fs.exists(data_path(hot_dir, first))   # else only the .idx is left
        if had_data:
            self._ensure_dir(cold_dir)
            for path_of in (data_path, idx_path):
                self._copy(path_of(hot_dir, first), path_of(cold_dir, first), tick)
            self.fs.sync_dir(cold_dir)
            failpoint.hit("cold::after_copy")
        self.lock.acquire(LOCK_WAIT_S, tick)
        try:
            if not self.fs.exists(idx_path(hot_dir, first)):
                return   # swept meanwhile: its topic went or it fell below the floors
            if had_data:
                self._carry_flips(hot_dir, cold_dir, first, count)
            failpoint.hit("cold::before_hot_delete")
            parts = {"data", "idx"} if had_data else {"idx"}
            segment_sweep.remove_segment(self.fs, hot_dir, first, parts)
        finally:
            self.lock.release()
        log.info("event=segment_relocated dir=%s first_seq=%d records=%d", cold_dir, first,
                 count)

    def _ensure_dir(self, directory: str) -> None:
        missing = []
        while not self.fs.is_dir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for path in reversed(missing):
            self.fs.makedirs(path)
            self.fs.sync_dir(os.path.dirname(path))

    def _copy(self, src: str, dst: str, tick: Callable[[], None]) -> None:
        tmp = dst + ".tmp"
        source, target = self.fs.open_read(src), self.fs.open(tmp, create=True, truncate=True)
        try:
            size, offset = source.size(), 0
            while offset < size:
                chunk = source.read_at(min(COPY_CHUNK_BYTES, size - offset), offset)
                target.write_all_at(chunk, offset)
                offset += len(chunk)
                tick()
            target.sync_data()
        finally:
            source.close()
            target.close()
        self.fs.rename(tmp, dst)

    def _carry_flips(self, hot_dir: str, cold_dir: str, first: int, count: int) -> None:
        """Give the cold .data every del byte flipped on the hot one since the copy."""
        idx = self.fs.map_read(idx_path(hot_dir, first))
        hot, cold = self.fs.map_read(data_path(hot_dir, first)), None
        try:
            flips = [offset + length - 1 for offset, length, _, _ in
                     (idx_entry(idx, first, seq) for seq in range(first, first + count))
                     if hot[offset + length - 1] != DEL_LIVE]
            if not flips:
                return
            cold = self.fs.open(data_path(cold_dir, first))
            for at in flips:
                if cold.read_at(1, at)[0] == DEL_LIVE:
                    cold.write_all_at(hot[at:at + 1], at)
            cold.sync_data()
        finally:
            for view in (idx, hot):
                if hasattr(view, "close"):
                    view.close()
            if cold is not None:
                cold.close()
