"""Idempotency of appends for one topic.

Two kinds of key share the IdemKey WAL frame, so both survive a crash:
- user keys (the API's idempotency_key): kept for the topic's idempotency_window_ms;
- session keys `~<session>:<n>`, attached by our client library to every append so that a
  blind retry after a shard restart cannot duplicate a write. A session's appends reach the
  shard in order, so only its most recent SESSION_RING_MAX entries are kept.

Session keys are most of the keys a busy node holds (one per append, for every topic a
client writes to), so each session's keys in a topic are columns of numbers (SessionRing:
10 bytes a key) rather than a dict of strings and objects (about 300 bytes). A key that
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
SESSION_RING_SLACK = 32      # a ring trims its oldest keys once it holds this many more
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
    seq and record count; `newest_ms` is when the newest was written (the whole ring goes
    once the session has been idle for the window). A ring answers a retry with the seqs
    of its first write (a head_seq of 0: the reply's head is its last seq).

    Numbers and first seqs are kept as u32 offsets from the first ones the ring saw, counts
    as u16: 10 bytes a key. A value that does not fit (a session whose numbers ran 4 G
    ahead of its oldest key in this topic) widens that column to u64 offsets from 0."""

    __slots__ = ("numbers", "number_base", "firsts", "first_base", "counts", "newest_ms")

    def __init__(self):
        self.numbers = array("I")
        self.number_base = -1           # set by the first key
        self.firsts = array("I")
        self.first_base = -1
        self.counts = array("H")
        self.newest_ms = 0

    def __len__(self) -> int:
        return len(self.numbers)

    def _columns(self) -> tuple[array, array, array]:
        return self.numbers, self.firsts, self.counts

    def _index(self, number: int) -> int:
        """The position of `number`, or -1."""
        numbers, rel = self.numbers, number - self.number_base
        i = bisect.bisect_left(numbers, rel)
        return i if 0 <= rel and i < len(numbers) and numbers[i] == rel else -1

    def _entry(self, i: int) -> DedupeEntry:
        first = self.firsts[i] + self.first_base
        return DedupeEntry(first, first + self.counts[i] - 1, 0, self.newest_ms)

    def get(self, number: int) -> DedupeEntry | None:
        i = self._index(number)
        return self._entry(i) if i >= 0 else None

    def _row(self, number: int, entry: DedupeEntry) -> tuple[int, int, int]:
        """The entry as column values, the columns widened first where it does not fit."""
        if self.number_base < 0:
            self.number_base, self.first_base = number, entry.first_seq
        count = entry.last_seq - entry.first_seq + 1
        rel_number, rel_first = number - self.number_base, entry.first_seq - self.first_base
        if not 0 <= rel_number < 1 << (8 * self.numbers.itemsize):
            self.numbers = array("Q", (v + self.number_base for v in self.numbers))
            self.number_base, rel_number = 0, number
        if not 0 <= rel_first < 1 << (8 * self.firsts.itemsize):
            self.firsts = array("Q", (v + self.first_base for v in self.firsts))
            self.first_base, rel_first = 0, entry.first_seq
        if count >= 1 << (8 * self.counts.itemsize):
            self.counts = array("I", self.counts)
        return rel_number, rel_first, count

    def put(self, number: int, entry: DedupeEntry) -> None:
        if entry.created_ms > self.newest_ms:
            self.newest_ms = entry.created_ms
        row = self._row(number, entry)
        numbers = self.numbers
        if not numbers or row[0] > numbers[-1]:      # the usual case: the session's next
            numbers.append(row[0])
            self.firsts.append(row[1])
            self.counts.append(row[2])
        else:
            i = bisect.bisect_left(numbers, row[0])
            same = i < len(numbers) and numbers[i] == row[0]
            for column, value in zip(self._columns(), row):
                if same:
                    column[i] = value
                else:
                    column.insert(i, value)
        if len(numbers) > SESSION_RING_MAX + SESSION_RING_SLACK:
            oldest = len(numbers) - SESSION_RING_MAX
            for column in self._columns():
                del column[:oldest]

    def remove(self, number: int) -> DedupeEntry | None:
        i = self._index(number)
        if i < 0:
            return None
        entry = self._entry(i)
        for column in self._columns():
            del column[i]
        return entry

    def items(self) -> Iterator[tuple[int, DedupeEntry]]:
        return ((self.numbers[i] + self.number_base, self._entry(i))
                for i in range(len(self.numbers)))

    def to_row(self, session: str) -> list:
        """The snapshot form: [session, numbers, first seqs, counts, newest_ms], the
        columns as little-endian u64, u64 and u32 (a few objects to decode, not five per
        key)."""
        columns = (array("Q", (v + self.number_base for v in self.numbers)),
                   array("Q", (v + self.first_base for v in self.firsts)),
                   array("I", self.counts))
        if sys.byteorder == "big":
            columns = tuple(_swapped(column) for column in columns)
        return [session, *(column.tobytes() for column in columns), self.newest_ms]

    @classmethod
    def from_row(cls, row) -> tuple[str, "SessionRing"]:
        """A ring from its snapshot form; also the first form, whose last two columns were
        each key's last seq and created ms (u64)."""
        session, *raw = row
        ring = cls()
        if len(raw) == 4 and all(isinstance(r, bytes) for r in raw):
            numbers, firsts, lasts, created = (_column("Q", r, session) for r in raw)
            counts = array("I", (last - first + 1 for first, last in zip(firsts, lasts)))
            newest_ms = max(created, default=0)
            _check(session, numbers, firsts, lasts, created)
        elif len(raw) == 4 and isinstance(raw[3], int):
            numbers, firsts = _column("Q", raw[0], session), _column("Q", raw[1], session)
            counts, newest_ms = _column("I", raw[2], session), raw[3]
        else:
            raise CorruptionError(f"the idempotency keys of session {session!r} have no "
                                  "known form")
        _check(session, numbers, firsts, counts)
        if any(a >= b for a, b in zip(numbers, numbers[1:])):
            raise CorruptionError(f"the idempotency keys of session {session!r} are not in "
                                  "ascending order")
        ring.newest_ms = newest_ms
        if numbers:
            ring.number_base, ring.numbers = _narrow(numbers, "I")
            ring.first_base, ring.firsts = _narrow(firsts, "I")
            ring.counts = array("H" if max(counts) < 1 << 16 else "I", counts)
        return session, ring


def _column(typecode: str, data: bytes, session: str) -> array:
    column = array(typecode)
    if not isinstance(data, bytes) or len(data) % column.itemsize:
        raise CorruptionError(f"the idempotency keys of session {session!r}: a column is "
                              f"not whole {column.itemsize}-byte numbers")
    column.frombytes(data)
    if sys.byteorder == "big":
        column.byteswap()
    return column


def _narrow(column: array, typecode: str) -> tuple[int, array]:
    """(base, offsets from it) in `typecode` when they fit, else (0, the column)."""
    base = min(column)
    if max(column) - base < 1 << (8 * array(typecode).itemsize):
        return base, array(typecode, (v - base for v in column))
    return 0, column


def _check(session: str, *columns: array) -> None:
    if any(len(column) != len(columns[0]) for column in columns):
        raise CorruptionError(f"the idempotency keys of session {session!r}: columns of "
                              "different lengths")


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
