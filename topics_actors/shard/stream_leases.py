"""SSE streams that belong to no watch session (a queue's `GET /v0/topics/:q/work`,
spec/api.md 8), kept by the shard that owns hash(stream id), memory only.

Like a watch session's streams (shard/watch_sessions.py), each counts as open for a lease
the gateway renews at least every heartbeat, so a gateway that dies without closing them
lets them run out. They count in `sse_streams` and `sse_streams_by_owner` of `status`, the
figures the gateways sum to enforce TOPICS_MAX_SSE_CONNECTIONS and its per-key variant.
"""

from __future__ import annotations

from collections.abc import Callable

from topics_actors.protocol.messages import StreamLease


class StreamLeases:
    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.streams: dict[str, tuple[str, int]] = {}   # stream id -> (owner, deadline ms)

    def renew(self, msg: StreamLease) -> dict:
        if msg.closed:
            self.streams.pop(msg.stream, None)
        else:
            self.streams[msg.stream] = (msg.owner, self.clock() + msg.lease_ms)
        return {"stream": msg.stream}

    def add_to(self, census: dict) -> dict:
        """`census` (a watch census) with these streams counted in; expired ones dropped."""
        now = self.clock()
        for stream in [s for s, (_, deadline) in self.streams.items() if deadline < now]:
            del self.streams[stream]
        by_owner = census.setdefault("sse_streams_by_owner", {})
        census["sse_streams"] = census.get("sse_streams", 0) + len(self.streams)
        for owner, _ in self.streams.values():
            if owner:
                by_owner[owner] = by_owner.get(owner, 0) + 1
        return census
