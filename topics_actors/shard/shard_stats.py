"""A shard's counters, reported by `status` (and summed into the node's metrics)."""

from __future__ import annotations

import dataclasses


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

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)
