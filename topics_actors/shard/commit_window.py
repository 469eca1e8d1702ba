"""How long a shard's turn keeps gathering fsync-class writes before it commits: the
adaptive group-commit window.

Waiting costs every writer already gathered the time waited; it pays when writers who
would otherwise need an fsync of their own arrive meanwhile. So the window
- opens only when at least two fsync-class writers are gathered (a lone writer commits at
  once: group commit never slows a quiet topic);
- closes as soon as the writers of the previous commit are all back (closed-loop
  producers resend right after their ack), or when a quiet slice passes with no arrival:
  a few of the gaps between arrivals lately seen in windows (the arrival rate), at least a
  quarter of the fsync time;
- never exceeds the measured fsync time (a moving average), within [floor, ceiling]: a
  writer then waits at most about one fsync for company plus one fsync for the commit, so
  the ack's p99 stays near twice the fsync time under load.
"""

from __future__ import annotations

FLOOR_MS = 0.25
CEILING_MS = 10.0
QUIET_MIN_MS = 0.05
QUIET_MAX_MS = 0.5
_ALPHA = 0.2                    # weight of the newest fsync in the moving average
GAPS_QUIET = 3.0                # a quiet slice lasts this many typical arrival gaps


class CommitWindow:
    def __init__(self, floor_ms: float = FLOOR_MS, ceiling_ms: float = CEILING_MS):
        self.floor_ms, self.ceiling_ms = floor_ms, ceiling_ms
        self.fsync_ms = floor_ms         # until measured
        self.cohort = 0                  # fsync-class writers in the previous synced commit
        self.gap_ms = 0.0                # moving average gap between arrivals in a window

    def synced(self, fsync_ms: float, writers: int) -> None:
        """A commit's fdatasync took `fsync_ms` and answered `writers` fsync-class writes."""
        self.fsync_ms += _ALPHA * (fsync_ms - self.fsync_ms)
        self.cohort = writers

    def limit_ms(self) -> float:
        """The longest the window stays open."""
        return min(max(self.fsync_ms, self.floor_ms), self.ceiling_ms)

    def arrived(self, gap_ms: float, count: int) -> None:
        """`count` requests arrived in an open window, `gap_ms` after the previous ones."""
        if count > 0:
            self.gap_ms += _ALPHA * (gap_ms / count - self.gap_ms)

    def quiet_ms(self) -> float:
        """A silence this long ends the window: nobody else is coming soon."""
        quiet = max(self.fsync_ms / 4, GAPS_QUIET * self.gap_ms)
        return min(max(quiet, QUIET_MIN_MS), QUIET_MAX_MS)

    def complete(self, writers: int) -> bool:
        """Whether the gathered writers already match the previous commit's."""
        return self.cohort > 1 and writers >= self.cohort
