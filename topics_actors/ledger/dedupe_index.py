"""Idempotency of appends for one topic.

Two kinds of key share the IdemKey WAL frame, so both survive a crash:
- user keys (the API's idempotency_key): kept for the topic's idempotency_window_ms;
- session keys `~<session>:<n>`, attached by our client library to every append so that a
  blind retry after a shard restart cannot duplicate a write. A session's appends reach the
  shard in order, so only its most recent SESSION_RING_MAX entries are kept.

Session keys are most of the keys a busy node holds (one per append, for every topic a
client writes to), so each session's keys in a topic are columns of numbers (SessionRing:
32 bytes a key) rather than a dict of strings and objects (about 300 bytes). A key that
starts with `~` but whose `n` is not a plain decimal number is kept as a user key: for the
whole window, which dedupes at least as long.
"""

from __future__ import annotations

import bisect
import collections
import sys
from array import array
from collections.abc import Iterator
from typing import NamedTuple

from topics_actors.errors import CorruptionError, InvariantViolation

SESSION_PREFIX = "~"
SESSION_RING_MAX = 512
SESSION_RING_SLACK = 128     # a ring trims its oldest keys once it holds this many more
USER_KEYS_MAX = 1_000_000
NUMBER_DIGITS_MAX = 19       # a key number below 10**19 fits in a u64 column


class DedupeEntry(NamedTuple):
    first_seq: int
    last_seq: int
    head_seq: int
    created_ms: int

    def reply(self, topic: str, return_seqs: bool) -> dict:
        """The answer to a retried append: the original write's seqs."""
        reply = {"topic": topic, "first_seq": self.first_seq, "last_seq": self.last_seq,
                 "head_seq": self.head_seq or self.last_seq,
                 "count": self.last_seq - self.first_seq + 1, "created": False,
                 "deduped": True}
        if return_seqs:
            reply["seqs"] = list(range(self.first_seq, self.last_seq + 1))
        return reply


def session_key(key: str) -> tuple[str, int] | None:
    """(session, n) of a session key `~<session>:<n>`; None for any other key."""
    if not key.startswith(SESSION_PREFIX):
        return None
    session, colon, number = key.partition(":")
    if (not colon or not number.isascii() or not number.isdigit()
            or len(number) > NUMBER_DIGITS_MAX or (number[0] == "0" and len(number) > 1)):
        return None
    return session, int(number)


class SessionRing:
    """One session's newest keys in one topic, by key number (ascending): a number's first
    and last seq and when it was written. A ring answers a retry with the seqs of its
    first write (a head_seq of 0: the reply's head is its last seq)."""

    __slots__ = ("numbers", "firsts", "lasts", "created", "newest_ms")

    def __init__(self):
        self.numbers = array("Q")
        self.firsts = array("Q")
        self.lasts = array("Q")
        self.created = array("Q")
        self.newest_ms = 0

    def __len__(self) -> int:
        return len(self.numbers)

    def _index(self, number: int) -> int:
        """The position of `number`, or -1."""
        numbers = self.numbers
        i = bisect.bisect_left(numbers, number)
        return i if i < len(numbers) and numbers[i] == number else -1

    def get(self, number: int) -> DedupeEntry | None:
        i = self._index(number)
        if i < 0:
            return None
        return DedupeEntry(self.firsts[i], self.lasts[i], 0, self.created[i])

    def put(self, number: int, entry: DedupeEntry) -> None:
        numbers = self.numbers
        self.newest_ms = max(self.newest_ms, entry.created_ms)
        if not numbers or number > numbers[-1]:      # the usual case: the session's next
            numbers.append(number)
            self.firsts.append(entry.first_seq)
            self.lasts.append(entry.last_seq)
            self.created.append(entry.created_ms)
        else:
            i = bisect.bisect_left(numbers, number)
            if i < len(numbers) and numbers[i] == number:
                self.firsts[i], self.lasts[i] = entry.first_seq, entry.last_seq
                self.created[i] = entry.created_ms
            else:
                numbers.insert(i, number)
                self.firsts.insert(i, entry.first_seq)
                self.lasts.insert(i, entry.last_seq)
                self.created.insert(i, entry.created_ms)
        if len(numbers) > SESSION_RING_MAX + SESSION_RING_SLACK:
            self._keep_from(len(numbers) - SESSION_RING_MAX)

    def _keep_from(self, start: int) -> None:
        for column in (self.numbers, self.firsts, self.lasts, self.created):
            del column[:start]

    def remove(self, number: int) -> DedupeEntry | None:
        i = self._index(number)
        if i < 0:
            return None
        entry = DedupeEntry(self.firsts[i], self.lasts[i], 0, self.created[i])
        for column in (self.numbers, self.firsts, self.lasts, self.created):
            del column[i]
        return entry

    def items(self) -> Iterator[tuple[int, DedupeEntry]]:
        return ((number, DedupeEntry(first, last, 0, created)) for number, first, last, created
                in zip(self.numbers, self.firsts, self.lasts, self.created))

    def to_row(self, session: str) -> list:
        """The snapshot form: [session, numbers, first seqs, last seqs, created ms], each
        column as little-endian u64s (a few objects to decode, not five per key)."""
        columns = (self.numbers, self.firsts, self.lasts, self.created)
        if sys.byteorder == "big":
            columns = tuple(_swapped(column) for column in columns)
        return [session, *(column.tobytes() for column in columns)]

    @classmethod
    def from_row(cls, row) -> tuple[str, "SessionRing"]:
        session, *raw = row
        if len(raw) != 4 or any(len(r) != len(raw[0]) or len(r) % 8 for r in raw):
            raise CorruptionError(f"the idempotency keys of session {session!r} are not "
                                  "four u64 columns of one length")
        ring = cls()
        for column, data in zip((ring.numbers, ring.firsts, ring.lasts, ring.created), raw):
            column.frombytes(data)
            if sys.byteorder == "big":
                column.byteswap()
        ring.newest_ms = max(ring.created, default=0)
        return session, ring


def _swapped(column: array) -> array:
    column = array(column.typecode, column)
    column.byteswap()
    return column


class DedupeIndex:
    __slots__ = ("user", "sessions")

    def __init__(self):
        self.user: collections.OrderedDict[str, DedupeEntry] = collections.OrderedDict()
        self.sessions: dict[str, SessionRing] = {}

    def __len__(self) -> int:
        return len(self.user) + sum(len(ring) for ring in self.sessions.values())

    def _expire_user(self, now_ms: int, window_ms: int) -> None:
        user = self.user
        while user and now_ms - next(iter(user.values())).created_ms > window_ms:
            user.popitem(last=False)

    def _expire_sessions(self, now_ms: int, window_ms: int) -> None:
        for name in [n for n, ring in self.sessions.items()
                     if now_ms - ring.newest_ms > window_ms]:
            del self.sessions[name]

    def expire(self, now_ms: int, window_ms: int) -> None:
        self._expire_user(now_ms, window_ms)
        self._expire_sessions(now_ms, window_ms)

    def lookup(self, key: str, now_ms: int, window_ms: int) -> DedupeEntry | None:
        parsed = session_key(key)
        if parsed is None:
            self._expire_user(now_ms, window_ms)
            return self.user.get(key)
        ring = self.sessions.get(parsed[0])
        return ring.get(parsed[1]) if ring is not None else None

    def add(self, key: str, entry: DedupeEntry, window_ms: int) -> None:
        if entry.first_seq > entry.last_seq or entry.first_seq < 1:
            raise InvariantViolation(f"a deduped write of seqs {entry.first_seq}.."
                                     f"{entry.last_seq}: a retry would be answered wrong")
        parsed = session_key(key)
        if parsed is None:
            self.user[key] = entry
            if len(self.user) > USER_KEYS_MAX:
                self.user.popitem(last=False)
            return
        session, number = parsed
        ring = self.sessions.get(session)
        if ring is None:   # sessions come and go rarely: sweep idle ones only then
            self._expire_sessions(entry.created_ms, window_ms)
            ring = self.sessions[session] = SessionRing()
        ring.put(number, entry)

    def discard(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> DedupeEntry | None:
        parsed = session_key(key)
        if parsed is None:
            return self.user.pop(key, None)
        ring = self.sessions.get(parsed[0])
        if ring is None:
            return None
        entry = ring.remove(parsed[1])
        if not ring:
            del self.sessions[parsed[0]]
        return entry

    def session_rows(self) -> list[list]:
        """The session rings in their snapshot form (SessionRing.to_row)."""
        return [ring.to_row(session) for session, ring in self.sessions.items()]

    def take_row(self, row, now_ms: int, window_ms: int) -> None:
        """Restore a ring from its snapshot form, unless its session has been idle for
        longer than the window."""
        session, ring = SessionRing.from_row(row)
        if ring and now_ms - ring.newest_ms <= window_ms:
            self.sessions[session] = ring

    def items(self) -> Iterator[tuple[str, DedupeEntry]]:
        """Every (key, entry): user keys, then each session's by number."""
        yield from self.user.items()
        for session, ring in self.sessions.items():
            for number, entry in ring.items():
                yield f"{session}:{number}", entry

    def drop_after(self, last: int) -> list[tuple[str, DedupeEntry]]:
        """Forget the keys whose records go past seq `last`; returns them (put_back)."""
        gone = [(key, entry) for key, entry in self.items() if entry.last_seq > last]
        for key, _entry in gone:
            self._remove(key)
        return gone

    def put_back(self, gone: list[tuple[str, DedupeEntry]]) -> None:
        """Undo drop_after."""
        for key, entry in gone:
            parsed = session_key(key)
            if parsed is None:
                self.user[key] = entry
            else:
                self.sessions.setdefault(parsed[0], SessionRing()).put(parsed[1], entry)
