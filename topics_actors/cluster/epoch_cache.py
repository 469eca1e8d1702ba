"""A replica's leader-epoch history: for each leader epoch, the seq of the first record
written in it. It answers the one question replication needs after any failover, "where
does my log stop agreeing with the leader's?", by epochs and not by the high watermark,
which lags and would cut acked records (Kafka KIP-101, with KIP-279's answer of an epoch
and an end seq so divergence over several failovers converges).

Positions are log end seqs ("leo": the seq the next record would get; a log holding seqs
1..head has leo head + 1). The history is rebuilt from the frames' epochs at recovery, so
it needs no file of its own.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from topics_actors.errors import InvariantViolation


class EpochEnd(NamedTuple):
    """A leader's answer: its largest epoch at or below the one asked about, and the leo at
    which that epoch ended in its log (None, None: it knows no epoch at all)."""
    epoch: int | None
    end_leo: int | None


class EpochCache:
    def __init__(self, entries: list[tuple[int, int]] | None = None):
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self.assign(epoch, start)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    @property
    def latest(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_seq: int) -> None:
        """Record that `epoch`'s first record is `start_seq` (a new leader, or a follower
        seeing a frame of a new epoch). An entry already present is kept; entries the new
        one contradicts (a later epoch, or a later start) are dropped, since a log is
        truncated before it is overwritten."""
        if self._epochs and self._epochs[-1] == epoch:
            return
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_seq):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_seq)

    def end_for(self, epoch: int, leo: int) -> EpochEnd:
        """The leader's side: where `epoch` ended in a log whose leo is `leo`."""
        if not self._epochs:
            return EpochEnd(None, None)
        if epoch >= self._epochs[-1]:
            return EpochEnd(self._epochs[-1], leo)
        after = bisect.bisect_right(self._epochs, epoch)     # first epoch above the asked
        if after == 0:
            return EpochEnd(None, self._starts[0])           # older than all our history
        return EpochEnd(self._epochs[after - 1], self._starts[after])

    def truncate_to(self, leo: int) -> None:
        """The log lost every seq from `leo` on: forget epochs that started there or later."""
        while self._starts and self._starts[-1] >= leo:
            self._epochs.pop()
            self._starts.pop()

    def divergence(self, leader: EpochEnd, asked: int | None, my_leo: int) -> int:
        """The follower's side: the leo to truncate to, given the leader's answer about
        `asked` (this log's latest epoch). Never above a point where the logs may differ:
        a record is identified by (seq, epoch), and only one leader ever writes an epoch.
        One answer may stop short of the exact point when several failovers intervened;
        the follower asks again with its new latest epoch until `settled`."""
        if leader.end_leo is None:
            return 1                              # the leader holds no record at all
        if leader.epoch is None:                  # our epochs predate all the leader's
            return min(leader.end_leo, my_leo)
        if asked is not None and leader.epoch > asked:
            raise InvariantViolation(f"asked about epoch {asked}, the leader answered "
                                     f"{leader.epoch}")
        mine = self.end_for(leader.epoch, my_leo)
        return min(leader.end_leo, mine.end_leo if mine.end_leo is not None else 1, my_leo)

    def settled(self, leader: EpochEnd) -> bool:
        """Whether the leader's answer was about this log's own latest epoch, so the
        truncation it gave is exact and fetching may start."""
        return leader.epoch is None or leader.epoch == self.latest
