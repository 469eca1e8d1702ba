"""HTTP requests and their latency per route, counted by every gateway and summed over all.

Several gateway processes accept on one socket and GET /v0/metrics reaches any one of them,
so each gateway counts into its own slot of a file in the node's run directory (created and
zeroed by the supervisor at start, one slot per gateway index; the pattern of
`shard/byte_quota.py`) and the metrics handler adds every slot up. Per route (the route
table's handler name, a closed set: never the raw path) a slot holds the requests per status
class, a latency histogram with fixed buckets and the latency sum in microseconds: one
request is three integer increments in shared memory and no message.

Restarts: a gateway restarted under the same index maps its slot and counts on from what its
predecessor left; it never zeroes it. Every increment is a store into the shared mapping, so
a gateway killed with SIGKILL loses none it made and nothing is counted twice; only requests
in flight when it died are not counted. The figures start from zero when the node starts,
like the shards' `topics_wal_*` counters (a counter reset to Prometheus).

Latency is the gateway's time from a request with its body read to its response ready (for a
watch stream: its headers). A reader may see a request's status counted and its bucket not
yet: `_count` is the sum of the buckets, so each histogram is consistent in itself.
"""

from __future__ import annotations

import bisect
import dataclasses
import mmap
import os

from topics_actors.gateway.route_table import UNMATCHED, handler_names

ROUTES = handler_names()
# Bucket upper bounds in microseconds (Prometheus `le`, in seconds: 0.0005 .. 30); a last
# bucket, +Inf, follows. Long polls and claims wait up to 30 s.
BOUNDS_US = (500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
             1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000)
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
_BUCKETS = len(BOUNDS_US) + 1
_ROUTE_WORDS = len(STATUS_CLASSES) + _BUCKETS + 1    # classes, buckets, latency sum (µs)
_SUM = _ROUTE_WORDS - 1
SLOT_WORDS = len(ROUTES) * _ROUTE_WORDS
WORD_BYTES = 8
SLOT_BYTES = SLOT_WORDS * WORD_BYTES


def create_file(path: str, slots: int) -> None:
    """Create (or zero) the file with one slot per gateway; the supervisor does this at
    start, before any gateway runs."""
    with open(path, "wb") as f:
        f.write(bytes(max(1, slots) * SLOT_BYTES))


@dataclasses.dataclass(frozen=True)
class RouteFigures:
    """One route's figures summed over the gateways."""
    statuses: dict          # status class ("2xx") -> requests, classes seen only
    buckets: tuple          # requests per latency bucket (not cumulative); the last is +Inf
    sum_us: int             # latency sum, microseconds

    @property
    def count(self) -> int:
        return sum(self.buckets)


class RequestStats:
    """The counting side (this gateway's slot) and the summing side (every slot).

    Without a path (tests, a gateway outside a node) it counts in private memory, and the
    sums are this gateway's alone."""

    def __init__(self, path: str | None, slot: int):
        self.slot = slot
        self._map: mmap.mmap | None = None
        if path is None:
            self._all = memoryview(bytearray(SLOT_BYTES)).cast("Q")
            self._slots = 1
            slot = 0
        else:
            fd = os.open(path, os.O_RDWR)
            try:
                self._map = mmap.mmap(fd, 0)
            finally:
                os.close(fd)
            self._all = memoryview(self._map).cast("Q")
            self._slots = len(self._all) // SLOT_WORDS
            if not 0 <= slot < self._slots:
                raise ValueError(f"gateway slot {slot} is not in the file's {self._slots}")
        self._own = self._all[slot * SLOT_WORDS:(slot + 1) * SLOT_WORDS]
        self._base = {name: i * _ROUTE_WORDS for i, name in enumerate(ROUTES)}

    def record(self, route: str, status: int, elapsed_ns: int) -> None:
        """Count one answered request; `route` is a handler name (others count as
        UNMATCHED)."""
        base = self._base.get(route)
        if base is None:
            base = self._base[UNMATCHED]
        own, elapsed_us = self._own, elapsed_ns // 1_000
        own[base + min(max(status // 100, 1), 5) - 1] += 1
        own[base + len(STATUS_CLASSES) + bisect.bisect_left(BOUNDS_US, elapsed_us)] += 1
        own[base + _SUM] += elapsed_us

    def totals(self) -> list[int]:
        """Every word summed over the slots."""
        every = self._all
        total = every[0:SLOT_WORDS].tolist()
        for slot in range(1, self._slots):
            start = slot * SLOT_WORDS
            total = [a + b for a, b in zip(total, every[start:start + SLOT_WORDS].tolist())]
        return total

    def figures(self) -> dict[str, RouteFigures]:
        """The node's figures per route, routes with at least one request only."""
        total, found = self.totals(), {}
        classes = len(STATUS_CLASSES)
        for name, base in self._base.items():
            words = total[base:base + _ROUTE_WORDS]
            if not any(words[:classes]):
                continue
            statuses = {label: n for label, n in zip(STATUS_CLASSES, words[:classes]) if n}
            found[name] = RouteFigures(statuses, tuple(words[classes:_SUM]), words[_SUM])
        return found

    def close(self) -> None:
        self._own.release()
        self._all.release()
        if self._map is not None:
            self._map.close()
            self._map = None
