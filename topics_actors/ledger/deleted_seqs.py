"""The seqs of a topic deleted one by one (by a tag match, a queue's acks and dead letters)
that its shard must still skip without reading them: as runs of consecutive seqs.

A shard keeps these until a floor passes them (topic_state.py says why), and a queue's
acked jobs are most of them: a queue that is never capped would otherwise hold one Python
int in a set, about 70 bytes, per job it ever served. Acks come mostly in order, so its
seqs merge into a few runs; isolated seqs (one record in four deleted by tag) cost 16 bytes
each. New seqs wait in a small set and are merged into the runs RECENT_MAX at a time.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator

RECENT_MAX = 1024


class DeletedSeqs:
    __slots__ = ("starts", "ends", "recent")

    def __init__(self, seqs: Iterable[int] = ()):
        self.starts = array("Q")     # runs [start, end], ascending, apart by at least one seq
        self.ends = array("Q")
        self.recent: set[int] = set()
        self.update(seqs)

    # --- queries ---------------------------------------------------------------------------

    def __contains__(self, seq: int) -> bool:
        if seq in self.recent:
            return True
        if not self.starts:
            return False
        i = bisect.bisect_right(self.starts, seq) - 1
        return i >= 0 and seq <= self.ends[i]

    def __bool__(self) -> bool:
        return bool(self.starts) or bool(self.recent)

    def __len__(self) -> int:
        return sum(e - s + 1 for s, e in zip(self.starts, self.ends)) + len(self.recent)

    def __iter__(self) -> Iterator[int]:
        self._merge()
        for start, end in zip(self.starts, self.ends):
            yield from range(start, end + 1)

    def __eq__(self, other) -> bool:
        if not isinstance(other, DeletedSeqs):
            return NotImplemented
        return self.runs() == other.runs()

    def runs(self) -> list[tuple[int, int]]:
        self._merge()
        return list(zip(self.starts, self.ends))

    def first(self) -> int | None:
        """The lowest seq, or None."""
        lows = ([self.starts[0]] if self.starts else []) + ([min(self.recent)]
                                                             if self.recent else [])
        return min(lows) if lows else None

    def next_absent(self, seq: int) -> int:
        """The lowest seq at or after `seq` that is not here."""
        self._merge()
        i = bisect.bisect_right(self.starts, seq) - 1
        return self.ends[i] + 1 if i >= 0 and seq <= self.ends[i] else seq

    # --- changes ---------------------------------------------------------------------------

    def add(self, seq: int) -> None:
        self.recent.add(seq)
        if len(self.recent) >= RECENT_MAX:
            self._merge()

    def update(self, seqs: Iterable[int]) -> None:
        for seq in seqs:
            self.add(seq)

    def drop_through(self, floor: int) -> None:
        """Forget every seq at or below `floor`."""
        self._merge()
        i = bisect.bisect_right(self.ends, floor)
        del self.starts[:i]
        del self.ends[:i]
        if self.starts and self.starts[0] <= floor:
            self.starts[0] = floor + 1

    def take_above(self, last: int) -> "DeletedSeqs":
        """Remove the seqs above `last` and return them (put_back undoes it)."""
        self._merge()
        taken = DeletedSeqs()
        i = bisect.bisect_right(self.ends, last)
        taken.starts, taken.ends = self.starts[i:], self.ends[i:]
        del self.starts[i:]
        del self.ends[i:]
        if taken.starts and taken.starts[0] <= last:
            self.starts.append(taken.starts[0])
            self.ends.append(last)
            taken.starts[0] = last + 1
        return taken

    def put_back(self, other: "DeletedSeqs") -> None:
        self._merge(other.runs())

    def _merge(self, extra: list[tuple[int, int]] = ()) -> None:
        """Fold `recent`, and the runs `extra`, into the runs."""
        if not self.recent and not extra:
            return
        fresh = sorted(self.recent)
        self.recent = set()
        starts, ends = self.starts, self.ends
        if not extra and (not starts or fresh[0] > ends[-1]):   # the usual case: all after
            _append_runs(starts, ends, fresh)                    # the last run
            return
        merged_starts, merged_ends = array("Q"), array("Q")
        runs = sorted(list(zip(starts, ends)) + [(s, s) for s in fresh] + list(extra))
        for start, end in runs:
            if merged_ends and start <= merged_ends[-1] + 1:
                merged_ends[-1] = max(merged_ends[-1], end)
            else:
                merged_starts.append(start)
                merged_ends.append(end)
        self.starts, self.ends = merged_starts, merged_ends


def _append_runs(starts: array, ends: array, seqs: list[int]) -> None:
    """Add ascending `seqs`, all above the last run, as runs."""
    for seq in seqs:
        if ends and seq <= ends[-1] + 1:
            ends[-1] = max(ends[-1], seq)
        else:
            starts.append(seq)
            ends.append(seq)
