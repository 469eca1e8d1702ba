"""Parked diff reads (`wait_ms`): answered when their topic publishes or at their deadline.

Waking is driven by the commit that publishes records, never by polling. The number of
parked reads is bounded; beyond it a read is answered at once (an empty, caught-up page).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import NamedTuple

from topics_actors.limits import DIFF_WAIT_MS_MAX, LONG_POLLS_MAX


class Park(NamedTuple):
    """What a read answers when it would rather wait: park me on `topic` for `wait_ms`, and
    call `answer()` when the topic publishes or the wait is over."""
    topic: str
    wait_ms: int
    answer: Callable[[], dict]


class Waiter:
    __slots__ = ("peer", "corr", "t0_ns", "topic", "answer", "deadline_ns", "done")

    def __init__(self, peer: bytes, corr: int, t0_ns: int, park: Park, now_ns: int):
        self.peer, self.corr, self.t0_ns = peer, corr, t0_ns
        self.topic, self.answer = park.topic, park.answer
        self.deadline_ns = now_ns + min(park.wait_ms, DIFF_WAIT_MS_MAX) * 1_000_000
        self.done = False


class LongPolls:
    def __init__(self, capacity: int = LONG_POLLS_MAX):
        self.capacity = capacity
        self.by_topic: dict[str, list[Waiter]] = {}
        self.deadlines: list[tuple[int, int, Waiter]] = []
        self.count = 0
        self._order = itertools.count()

    def park(self, waiter: Waiter) -> bool:
        if self.count >= self.capacity:
            return False
        self.by_topic.setdefault(waiter.topic, []).append(waiter)
        heapq.heappush(self.deadlines, (waiter.deadline_ns, next(self._order), waiter))
        self.count += 1
        return True

    def _finish(self, waiters) -> list[Waiter]:
        live = [w for w in waiters if not w.done]
        for waiter in live:
            waiter.done = True
        self.count -= len(live)
        return live

    def wake(self, topic: str) -> list[Waiter]:
        return self._finish(self.by_topic.pop(topic, ()))

    def expire(self, now_ns: int) -> list[Waiter]:
        due = []
        while self.deadlines and self.deadlines[0][0] <= now_ns:
            due.append(heapq.heappop(self.deadlines)[2])
        for waiter in due:
            peers = self.by_topic.get(waiter.topic)
            if peers is not None and waiter in peers:
                peers.remove(waiter)
                if not peers:
                    del self.by_topic[waiter.topic]
        return self._finish(due)

    def ms_until_next(self, now_ns: int) -> float | None:
        while self.deadlines and self.deadlines[0][2].done:
            heapq.heappop(self.deadlines)
        if not self.deadlines:
            return None
        return max(0.0, (self.deadlines[0][0] - now_ns) / 1e6)
