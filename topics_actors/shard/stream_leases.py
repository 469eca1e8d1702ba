"""SSE streams that belong to no watch session (a queue's `GET /v0/topics/:q/work`,
spec/api.md 8), kept by the shard that owns hash(stream id), memory only.

Like a watch session's streams (shard/watch_sessions.py), each counts as open for a lease
the gateway renews at least every heartbeat, so a gateway that dies without closing them
lets them run out. They count in `sse_streams` and `sse_streams_by_owner` of `status`, the
figures the gateways sum to enforce TOPICS_MAX_SSE_CONNECTIONS and its per-key variant;
kept as streams come and go, expired leases swept at most once a second.
"""

from __future__ import annotations

from collections.abc import Callable

from topics_actors.protocol.messages import StreamLease
from topics_actors.shard.watch_sessions import SWEEP_INTERVAL_MS, count_owner


class StreamLeases:
    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.streams: dict[str, tuple[str, int]] = {}   # stream id -> (owner, deadline ms)
        self.by_owner: dict[str, int] = {}
        self._swept_ms = -SWEEP_INTERVAL_MS

    def renew(self, msg: StreamLease) -> dict:
        if msg.closed:
            self._close(msg.stream)
        else:
            if msg.stream not in self.streams:
                count_owner(self.by_owner, msg.owner, 1)
            self.streams[msg.stream] = (msg.owner, self.clock() + msg.lease_ms)
        return {"stream": msg.stream}

    def _close(self, stream: str) -> None:
        owner, _ = self.streams.pop(stream, ("", 0))
        count_owner(self.by_owner, owner, -1)

    def add_to(self, census: dict) -> dict:
        """`census` (a watch census) with these streams counted in (kept as they change;
        leases that ran out are dropped at most once per SWEEP_INTERVAL_MS)."""
        now = self.clock()
        if now - self._swept_ms >= SWEEP_INTERVAL_MS:
            self._swept_ms = now
            for stream in [s for s, (_, deadline) in self.streams.items() if deadline < now]:
                self._close(stream)
        by_owner = census.setdefault("sse_streams_by_owner", {})
        census["sse_streams"] = census.get("sse_streams", 0) + len(self.streams)
        for owner, count in self.by_owner.items():
            by_owner[owner] = by_owner.get(owner, 0) + count
        return census
