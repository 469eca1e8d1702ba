"""The front's requests in flight: which client peer and corr each forwarded request
answers, which shard has it, and by when it must be answered.

A forwarded request travels under a corr of the front's own choosing (two clients may use
the same corr), so a shard's reply is matched here and goes back to its peer under the
client's corr. The table is bounded, and every entry has a deadline: a shard that died or
hangs leaves no request unanswered, since an expired entry is taken out and answered with
an error by the caller.
"""

from __future__ import annotations

import dataclasses
import heapq

CORR_MAX = (1 << 63) - 1       # forward corrs wrap below the protocol's u64 limit


@dataclasses.dataclass
class Gather:
    """A request answered by every shard (list_topics): the pages so far, and whether the
    client has been answered already (a shard's error answers it at once)."""
    shards: int
    pages: dict = dataclasses.field(default_factory=dict)    # shard -> reply body
    done: bool = False

    def complete(self) -> bool:
        return len(self.pages) == self.shards


@dataclasses.dataclass
class Pending:
    peer: bytes               # the client's identity on the front
    corr: int                 # the client's corr
    shard: int
    deadline_ns: int          # monotonic
    msg: object = None        # the decoded request (a gather merges by its fields)
    gather: Gather | None = None


class TableFull(Exception):
    """No room for another request in flight; the caller answers `throttled`."""


class ForwardTable:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._pending: dict[int, Pending] = {}
        self._deadlines: list[tuple[int, int]] = []    # (deadline_ns, forward corr), lazily
        self._next = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, pending: Pending) -> int:
        """Record `pending`; the corr to forward it under. Raises TableFull."""
        if len(self._pending) >= self.capacity:
            raise TableFull()
        while True:
            self._next = self._next % CORR_MAX + 1
            if self._next not in self._pending:
                break
        self._pending[self._next] = pending
        if len(self._deadlines) > 2 * self.capacity:     # answered entries' leftovers
            self._deadlines = [(p.deadline_ns, c) for c, p in self._pending.items()]
            heapq.heapify(self._deadlines)
            return self._next
        heapq.heappush(self._deadlines, (pending.deadline_ns, self._next))
        return self._next

    def take(self, corr: int) -> Pending | None:
        """The entry a shard's reply under `corr` answers (removed), or None when it
        expired or was failed already."""
        return self._pending.pop(corr, None)

    def expired(self, now_ns: int) -> list[Pending]:
        """Remove and return every entry whose deadline has passed."""
        gone = []
        while self._deadlines and self._deadlines[0][0] <= now_ns:
            _, corr = heapq.heappop(self._deadlines)
            pending = self._pending.pop(corr, None)
            if pending is not None:
                gone.append(pending)
        if not self._pending:
            self._deadlines.clear()     # nothing left to expire: drop the stale heap entries
        return gone

    def of_shards(self, shards: set[int]) -> list[Pending]:
        """Remove and return every entry waiting on one of `shards` (which went down)."""
        corrs = [c for c, p in self._pending.items() if p.shard in shards]
        return [self._pending.pop(c) for c in corrs]

    def next_deadline_ns(self) -> int | None:
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None
