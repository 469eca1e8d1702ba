"""A follower's replication of one topic from its leader, as a pure state machine: what to
ask next, and what each answer means for the local log.

It first asks the leader where their logs part (an epoch query about its latest epoch,
repeated until settled: cluster/epoch_cache.py), truncates there, then fetches from its own
durable leo. A fetch answer is applied only if it is for the leader epoch the follower
knows and starts exactly at its leo: a late, duplicated or reordered answer (a stale epoch,
a retried request) is dropped, so a frame is never applied twice or out of order. The
follower reports progress by its next fetch's `fetch_leo`, which advances only after its
own commit of what it applied (so `acks: all` means durable on every in-sync replica in
the topic's class).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from topics_actors.cluster.epoch_cache import EpochCache, EpochEnd
from topics_actors.errors import InvariantViolation


class EpochQuery(NamedTuple):
    topic: str
    leader_epoch: int
    asked_epoch: int | None


class FetchRequest(NamedTuple):
    topic: str
    leader_epoch: int
    fetch_leo: int             # the follower's durable leo: where the answer must start


class Truncate(NamedTuple):
    leo: int                   # drop every local record from this seq on


class Apply(NamedTuple):
    first_seq: int
    records: list              # as the leader sent them, seqs first_seq.. in order
    epochs: list[tuple[int, int]]   # (epoch, first seq) for epochs that start in the range


@dataclasses.dataclass
class FetchAnswer:
    leader_epoch: int
    first_seq: int
    records: list
    epochs: list[tuple[int, int]]
    hw_seq: int


class FollowerFetch:
    def __init__(self, topic: str, leader_epoch: int, cache: EpochCache, durable_leo: int):
        self.topic = topic
        self.leader_epoch = leader_epoch
        self.cache = cache
        self.durable_leo = durable_leo     # what the local log holds durably
        self.applied_leo = durable_leo     # applied, perhaps not committed yet
        self.settled = cache.latest is None    # nothing of ours to reconcile
        self.hw_seq = 0

    def next_request(self) -> EpochQuery | FetchRequest | None:
        """None while applied records wait for the local commit."""
        if not self.settled:
            return EpochQuery(self.topic, self.leader_epoch, self.cache.latest)
        if self.applied_leo != self.durable_leo:
            return None
        return FetchRequest(self.topic, self.leader_epoch, self.durable_leo)

    def on_epoch_end(self, leader_epoch: int, answer: EpochEnd) -> Truncate | None:
        """The leader's answer to the epoch query: the truncation to make, if any."""
        if leader_epoch != self.leader_epoch or self.settled:
            return None                    # an answer to an older question
        cut = self.cache.divergence(answer, self.cache.latest, self.applied_leo)
        truncate = None
        if cut < self.applied_leo:
            self.cache.truncate_to(cut)
            self.applied_leo = self.durable_leo = cut
            truncate = Truncate(cut)
        # Exact once the answer was about the epoch our log now ends in (one leader writes
        # an epoch, so equal epochs hold equal records up to the shorter end).
        self.settled = self.cache.latest is None or self.cache.settled(answer)
        return truncate

    def on_fetch(self, answer: FetchAnswer) -> Apply | None:
        """An answer of contiguous records: what to apply, None to drop it."""
        end_leo = answer.first_seq + len(answer.records)
        if not answer.records or not self.on_fetch_range(answer, end_leo):
            self.hw_seq = max(self.hw_seq, min(answer.hw_seq, answer.first_seq - 1)) if (
                self.is_current(answer)) else self.hw_seq
            return None
        return Apply(answer.first_seq, answer.records, answer.epochs)

    def on_fetch_range(self, answer: FetchAnswer, end_leo: int) -> bool:
        """An answer covering seqs [first_seq, end_leo), where seqs without a record are
        holes (deleted or evicted at the leader): whether to apply it (True: its epochs are
        in the cache and `applied_leo` is `end_leo`)."""
        if not self.is_current(answer):
            return False                   # stale, duplicated or out of order: dropped
        self.hw_seq = max(self.hw_seq, min(answer.hw_seq, end_leo - 1))
        if end_leo <= answer.first_seq:
            return False
        for epoch, start in answer.epochs:
            self.cache.assign(epoch, start)
        if end_leo < self.durable_leo:
            raise InvariantViolation(f"{self.topic!r}: an answer would take the log end back "
                                     f"from {self.durable_leo} to {end_leo}")
        self.applied_leo = end_leo
        return True

    def is_current(self, answer: FetchAnswer) -> bool:
        return (answer.leader_epoch == self.leader_epoch and self.settled
                and answer.first_seq == self.applied_leo
                and self.applied_leo == self.durable_leo)

    def committed(self, durable_leo: int) -> None:
        """The local commit of what was applied is durable (or failed: then the caller
        truncates back and calls this with the leo it kept)."""
        self.durable_leo = durable_leo
        self.applied_leo = durable_leo

    def leader_behind(self) -> None:
        """The leader's log ends before our durable leo in the same epoch (it lost an
        unsynced tail): ask again where the logs part, as after a leader change."""
        self.settled = self.cache.latest is None

    def new_leader_epoch(self, leader_epoch: int) -> None:
        """The controller moved leadership (or re-elected): ask again where logs part."""
        if leader_epoch > self.leader_epoch:
            self.leader_epoch = leader_epoch
            self.settled = self.cache.latest is None
