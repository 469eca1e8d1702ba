"""Idempotency of appends for one topic.

Two kinds of key share the IdemKey WAL frame, so both survive a crash:
- user keys (the API's idempotency_key): kept for the topic's idempotency_window_ms;
- session keys `~<session>:<n>`, attached by our client library to every append so that a
  blind retry after a shard restart cannot duplicate a write. A session's appends reach the
  shard in order, so only its most recent SESSION_RING_MAX entries are kept.
"""

from __future__ import annotations

import collections

SESSION_PREFIX = "~"
SESSION_RING_MAX = 512
USER_KEYS_MAX = 1_000_000


class DedupeEntry:
    __slots__ = ("first_seq", "last_seq", "head_seq", "created_ms")

    def __init__(self, first_seq: int, last_seq: int, head_seq: int, created_ms: int):
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.head_seq = head_seq
        self.created_ms = created_ms

    def reply(self, topic: str, return_seqs: bool) -> dict:
        """The answer to a retried append: the original write's seqs."""
        reply = {"topic": topic, "first_seq": self.first_seq, "last_seq": self.last_seq,
                 "head_seq": self.head_seq or self.last_seq,
                 "count": self.last_seq - self.first_seq + 1, "created": False,
                 "deduped": True}
        if return_seqs:
            reply["seqs"] = list(range(self.first_seq, self.last_seq + 1))
        return reply


class DedupeIndex:
    __slots__ = ("user", "sessions")

    def __init__(self):
        self.user: collections.OrderedDict[str, DedupeEntry] = collections.OrderedDict()
        self.sessions: dict[str, collections.OrderedDict[str, DedupeEntry]] = {}

    def __len__(self) -> int:
        return len(self.user) + sum(len(ring) for ring in self.sessions.values())

    @staticmethod
    def _session(key: str) -> str | None:
        if key.startswith(SESSION_PREFIX):
            return key.partition(":")[0]
        return None

    def _expire_user(self, now_ms: int, window_ms: int) -> None:
        user = self.user
        while user and now_ms - next(iter(user.values())).created_ms > window_ms:
            user.popitem(last=False)

    def _expire_sessions(self, now_ms: int, window_ms: int) -> None:
        for name in [n for n, ring in self.sessions.items()
                     if now_ms - next(reversed(ring.values())).created_ms > window_ms]:
            del self.sessions[name]

    def expire(self, now_ms: int, window_ms: int) -> None:
        self._expire_user(now_ms, window_ms)
        self._expire_sessions(now_ms, window_ms)

    def lookup(self, key: str, now_ms: int, window_ms: int) -> DedupeEntry | None:
        session = self._session(key)
        if session is None:
            self._expire_user(now_ms, window_ms)
            return self.user.get(key)
        ring = self.sessions.get(session)
        return ring.get(key) if ring is not None else None

    def add(self, key: str, entry: DedupeEntry, window_ms: int) -> None:
        session = self._session(key)
        if session is None:
            self.user[key] = entry
            if len(self.user) > USER_KEYS_MAX:
                self.user.popitem(last=False)
            return
        ring = self.sessions.get(session)
        if ring is None:   # sessions come and go rarely: sweep idle ones only then
            self._expire_sessions(entry.created_ms, window_ms)
            ring = self.sessions[session] = collections.OrderedDict()
        ring[key] = entry
        if len(ring) > SESSION_RING_MAX:
            ring.popitem(last=False)

    def discard(self, key: str) -> None:
        session = self._session(key)
        if session is None:
            self.user.pop(key, None)
        elif session in self.sessions:
            ring = self.sessions[session]
            ring.pop(key, None)
            if not ring:
                del self.sessions[session]
