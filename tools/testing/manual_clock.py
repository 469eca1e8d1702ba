"""A clock the test moves by hand: the injectable `clock()` of a shard, a session table or a
policy (milliseconds), so timeouts and deadlines are crossed exactly, never slept for."""

from __future__ import annotations


class ManualClock:
    def __init__(self, now: int = 1_000_000):
        self.now = now

    def __call__(self) -> int:
        return self.now
