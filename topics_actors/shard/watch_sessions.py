"""Watch sessions (spec/api.md 7.1, 7.2) kept by the shard that owns hash(wid).

Several gateway processes accept on one HTTP socket, so the POST that creates a session and
the GETs that stream it (and their reconnects) may land on different gateways. The session
therefore lives in one single-threaded owner, like every other piece of state: the shard
its wid hashes to, in memory only (lost when that shard restarts, as in the reference).
A session holds the authoritative cursor map, the creating key's identity (a hash, never the
key), its read options, its last access and its open streams. A stream is counted as open
for a lease the gateway renews at least every heartbeat; a gateway that dies without
closing its streams lets the leases run out, so nothing stays open forever.

Idle GC is lazy and bounded: at most once per SWEEP_INTERVAL_MS a request of these kinds
(or `status`) sweeps the sessions: streams whose lease ran out are dropped, and so is a
session with no open stream whose last access is older than SESSION_TTL_MS. The census
(sessions, open streams in total and per owner) is kept as streams open and close, so
`status` costs the same with ten thousand streams as with one; a lease that ran out keeps
counting until the next sweep, at most a second later.
"""

from __future__ import annotations

from collections.abc import Callable

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import WatchCreate, WatchCursor, WatchOpen

SESSION_TTL_MS = 300_000
SWEEP_INTERVAL_MS = 1_000


def count_owner(by_owner: dict[str, int], owner: str, delta: int) -> None:
    """Move `owner`'s count of open streams by `delta` (an owner at 0 leaves the map)."""
    if owner:
        left = by_owner.get(owner, 0) + delta
        if left:
            by_owner[owner] = left
        else:
            del by_owner[owner]


def unknown_session() -> TopicsError:
    return TopicsError("watch session not found (create a new one)", ErrorCode.NOT_FOUND)


class WatchSession:
    __slots__ = ("owner", "cursors", "options", "last_access_ms", "streams")

    def __init__(self, owner: str, cursors: dict, options: dict, now_ms: int):
        self.owner, self.cursors, self.options = owner, dict(cursors), options
        self.last_access_ms = now_ms
        self.streams: dict[str, int] = {}       # stream id -> lease deadline (epoch ms)

    def expired(self, now_ms: int) -> list[str]:
        return [stream for stream, deadline in self.streams.items() if deadline < now_ms]

    def idle(self, now_ms: int) -> bool:
        return not self.streams and now_ms - self.last_access_ms > SESSION_TTL_MS


class WatchSessions:
    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.sessions: dict[str, WatchSession] = {}
        self.streams = 0                          # open streams of every session
        self.by_owner: dict[str, int] = {}        # ... of each owner's sessions
        self._swept_ms = -SWEEP_INTERVAL_MS

    def gc(self) -> int:
        """Sweep (at most once per SWEEP_INTERVAL_MS); the sessions left."""
        now = self.clock()
        if now - self._swept_ms < SWEEP_INTERVAL_MS:
            return len(self.sessions)
        self._swept_ms = now
        for wid, session in list(self.sessions.items()):
            for stream in session.expired(now):
                self._close(session, stream)
            if session.idle(now):
                del self.sessions[wid]
        return len(self.sessions)

    def _open(self, session: WatchSession, stream: str, deadline_ms: int) -> None:
        if stream not in session.streams:
            self.streams += 1
            count_owner(self.by_owner, session.owner, 1)
        session.streams[stream] = deadline_ms

    def _close(self, session: WatchSession, stream: str) -> None:
        if session.streams.pop(stream, None) is None:
            return
        self.streams -= 1
        count_owner(self.by_owner, session.owner, -1)

    def _get(self, wid: str) -> WatchSession:
        self.gc()
        session = self.sessions.get(wid)
        if session is None:
            raise unknown_session()
        session.last_access_ms = self.clock()
        return session

    def create(self, msg: WatchCreate) -> dict:
        self.gc()
        self.sessions[msg.wid] = WatchSession(msg.owner, msg.cursors, msg.options,
                                              self.clock())
        return {"wid": msg.wid}

    def open(self, msg: WatchOpen) -> dict:
        session = self._get(msg.wid)
        if session.owner and msg.owner != session.owner:
            raise TopicsError("this watch session belongs to another key",
                              ErrorCode.UNAUTHORIZED)
        for topic, seq in (msg.rewind or {}).items():
            if topic in session.cursors and isinstance(seq, int) and seq >= 0:
                session.cursors[topic] = min(session.cursors[topic], seq)
        self._open(session, msg.stream, self.clock() + msg.lease_ms)
        return {"wid": msg.wid, "owner": session.owner, "cursors": dict(session.cursors),
                "options": session.options}

    def cursor(self, msg: WatchCursor) -> dict:
        session = self._get(msg.wid)
        session.cursors.update((t, s) for t, s in msg.cursors.items() if t in session.cursors)
        if msg.closed:
            self._close(session, msg.stream)
        else:
            self._open(session, msg.stream, self.clock() + msg.lease_ms)
        return {"wid": msg.wid}

    def census(self) -> dict:
        """Sessions and open streams (in total and per owner), kept as they change."""
        count = self.gc()
        return {"watch_sessions": count, "sse_streams": self.streams,
                "sse_streams_by_owner": dict(self.by_owner)}
