"""Claim coalescing (`claim_jitter_ms` > 0, spec/api.md 8): the first claim of a queue opens
a window of that many ms; every claim of the queue arriving meanwhile joins it; when it
closes, one pass deals the ready jobs round-robin, one at a time, among the claimers that
still want some.

A claim that joins a window is answered later: it parks (shard/long_poll.py) under the
window's key, never woken by an append. When the window is due, the shell submits a
ClaimPass (ShardCore.submit_due_claims); the pass is staged like any claim (its Lease
frames, if durable, commit first) and, once committed, wakes the window's claimers, each
answered with its share. Should the pass's batch fail, the claimers get `internal` when
their park runs out (the window plus PASS_GRACE_MS).
"""

from __future__ import annotations

import dataclasses
import itertools

from topics_actors.errors import StorageError, TopicsError

PASS_GRACE_MS = 1_000     # CLAIM_WAIT_MS_MAX (limits.py) = 5000 + this


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimPass:
    """shell -> core (never on the wire): the claim window of queue `topic` is due."""
    topic: str


class Member:
    """One claim waiting in a window; `result` is its reply once the pass committed, or
    `error` the pass's refusal (the queue is gone or no longer a queue)."""
    __slots__ = ("node", "want", "lease_ms", "result", "error")

    def __init__(self, node: str, want: int, lease_ms: int | None):
        self.node, self.want, self.lease_ms = node, want, lease_ms
        self.result: dict | None = None
        self.error: TopicsError | None = None

    def answer(self) -> dict:
        if self.error is not None:
            raise self.error
        if self.result is None:
            raise StorageError("the claim window's pass did not commit")
        return self.result


class Window:
    __slots__ = ("deadline", "members", "key")

    def __init__(self, deadline: int, key: str):
        self.deadline = deadline           # shard clock, ms
        self.members: list[Member] = []
        self.key = key                     # where its claims park (never a topic name)


class ClaimWindows:
    def __init__(self):
        self.open: dict[str, Window] = {}
        self.closing: dict[str, Window] = {}
        self._serial = itertools.count(1)

    def join(self, topic: str, jitter_ms: int, now: int, member: Member) -> str:
        """Add a claim to the queue's window (opening one); the key it parks under: not a
        topic name, so no append wakes it, and one per window."""
        window = self.open.get(topic)
        if window is None:
            window = self.open[topic] = Window(now + jitter_ms,
                                               f"\0claims:{next(self._serial)}:{topic}")
        window.members.append(member)
        return window.key

    def due(self, now: int) -> list[ClaimPass]:
        """Close the windows whose time came; the passes to submit."""
        if not self.open:
            return []
        closed = [topic for topic, window in self.open.items() if window.deadline <= now]
        for topic in closed:
            self.closing[topic] = self.open.pop(topic)
        return [ClaimPass(topic) for topic in closed]

    def ms_until_next(self, now: int) -> int | None:
        if not self.open:
            return None
        return max(0, min(w.deadline for w in self.open.values()) - now)

    def take(self, topic: str) -> Window | None:
        return self.closing.pop(topic, None)
