"""A shard's counters, reported by `status` (and summed into the node's metrics)."""

from __future__ import annotations

import bisect
import dataclasses

# The fdatasync latency histogram's upper bounds, in microseconds: the original's, so that
# `topics_wal_fsync_latency_us` reads the same on both servers (docs/HTTP.md 11).
FSYNC_BOUNDS_US = (50, 100, 250, 500, 1_000, 5_000, 10_000, 50_000, 100_000)
FSYNC_BUCKET_KEYS = tuple(f"fsync_le_{b}_us" for b in FSYNC_BOUNDS_US) + ("fsync_le_inf_us",)


@dataclasses.dataclass
class ShardStats:
    batches: int = 0          # commits that wrote to the WAL
    syncs: int = 0            # fdatasyncs (group commits and background flushes)
    records: int = 0          # records published
    requests: int = 0         # requests taken in
    throttled: int = 0        # writes refused because the inbox was full
    failed_batches: int = 0   # commits whose write or sync failed (rolled back)
    trusted_appends: int = 0  # prevalidated appends taken from the node's ipc socket
    windows: int = 0          # group-commit windows opened (shard/commit_window.py), and
    windows_full: int = 0     # how they closed: the previous commit's writers all back,
    windows_quiet: int = 0    # a quiet slice without an arrival,
    windows_limit: int = 0    # or the window's limit reached
    fetch_answers_refused: int = 0   # a leader's fetch answers whose frames failed a check
    bytes_written: int = 0    # bytes appended to the WAL
    rotations: int = 0        # batches that started a new WAL file
    fsync_us_sum: int = 0     # time spent in fdatasync, and each sync in its bucket
    fsync_buckets: list = dataclasses.field(
        default_factory=lambda: [0] * len(FSYNC_BUCKET_KEYS))

    def observe_fsync(self, elapsed_ns: int) -> None:
        us = elapsed_ns // 1000
        self.fsync_us_sum += us
        self.fsync_buckets[bisect.bisect_left(FSYNC_BOUNDS_US, us)] += 1

    def as_dict(self) -> dict[str, int]:
        """Flat counters (the gateway sums them over the shards by name)."""
        out = dataclasses.asdict(self)
        del out["fsync_buckets"]
        out.update(zip(FSYNC_BUCKET_KEYS, self.fsync_buckets))
        return out
