"""Idempotency of appends for one topic.

Two kinds of key share the IdemKey WAL frame, so both survive a crash:
- user keys (the API's idempotency_key): kept for the topic's idempotency_window_ms;
- session keys `~<session>:<n>`, attached by our client library to every append so that a
  blind retry after a shard restart cannot duplicate a write. A session's appends reach the
  shard in order, so only its most recent SESSION_RING_MAX entries are kept, and of those
  only the ones inside the window (what replay would bring back anyway).

Session keys are most of the keys a busy node holds (one per append, for every topic a
client writes to), so each session's keys in a topic are columns of numbers (SessionRing:
11 bytes a key) rather than a dict of strings and objects (about 300 bytes). A key that
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
    seq, record count and write time; `newest_ms` is when the newest was written (the whole
    ring goes once the session has been idle for the window). A ring answers a retry with
    the seqs of its first write (a head_seq of 0: the reply's head is its last seq).

    A key stays while it is one of the session's SESSION_RING_MAX newest in the topic and
    younger than the topic's window, as a user key would: a session writing slowly to many
    topics holds a few keys in each, not 512.

    Columns are offsets from a base each: numbers and first seqs u32, counts u8, write
    times u16 whole seconds, rounded up (so a key is never taken for older than it is):
    11 bytes a key. A value that does not fit rebases its column, or widens it."""

    __slots__ = ("numbers", "number_base", "firsts", "first_base", "counts", "times",
                 "time_base", "newest_ms")

    def __init__(self):
        self.numbers = array("I")
        self.number_base = -1           # set by the first key
        self.firsts = array("I")
        self.first_base = 0
        self.counts = array("B")
        self.times = array("H")
        self.time_base = 0
        self.newest_ms = 0

    def __len__(self) -> int:
        return len(self.numbers)

    def _columns(self) -> tuple[array, array, array, array]:
        return self.numbers, self.firsts, self.counts, self.times

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

    def _row(self, number: int, entry: DedupeEntry) -> tuple[int, int, int, int]:
        """The entry as column values, a column rebased or widened first where it does not
        fit."""
        if self.number_base < 0:
            self.number_base = number
            self.first_base, self.time_base = entry.first_seq, _seconds(entry.created_ms)
        count = entry.last_seq - entry.first_seq + 1
        while count >= 1 << (8 * self.counts.itemsize):
            self.counts = array(_WIDER[self.counts.typecode], self.counts)
        self.numbers, self.number_base, number = _fit(self.numbers, self.number_base, number)
        self.firsts, self.first_base, first = _fit(self.firsts, self.first_base,
                                                   entry.first_seq)
        self.times, self.time_base, seconds = _fit(self.times, self.time_base,
                                                   _seconds(entry.created_ms))
        return number, first, count, seconds

    def put(self, number: int, entry: DedupeEntry, window_ms: int | None = None) -> None:
        """Keep `number`'s write; then forget the keys over SESSION_RING_MAX and, given the
        window, those older than it (`entry` is the newest write: its time is now)."""
        first, last, _head, ms = entry
        if ms > self.newest_ms:
            self.newest_ms = ms
        numbers = self.numbers
        size, rel = len(numbers), number - self.number_base
        if size and rel > numbers[-1]:      # the usual case: the session's next key
            try:
                numbers.append(rel)
                self.firsts.append(first - self.first_base)
                self.counts.append(last - first + 1)
                self.times.append(-(-ms // 1000) - self.time_base)   # _seconds(ms)
                size += 1
            except OverflowError:           # a value that does not fit: the general way
                for column in self._columns():
                    del column[size:]
                self._place(number, entry)
                size = len(self.numbers)
        elif not size or not self._insert(rel, first, last, ms):
            self._place(number, entry)
            size = len(self.numbers)
        else:
            size += 1
        if size > SESSION_RING_MAX + SESSION_RING_SLACK:
            self._forget(size - SESSION_RING_MAX)
        elif (window_ms is not None and size > SESSION_RING_SLACK
              and self.times[SESSION_RING_SLACK - 1] < _cutoff(self, ms, window_ms)):
            self.expire(ms, window_ms)

    def _insert(self, rel: int, first: int, last: int, ms: int) -> bool:
        """Insert a new key before newer ones (appends in flight arrive a little out of
        order) when its values fit the columns as they are; False (nothing changed) for
        a key already here or a value that does not fit."""
        numbers = self.numbers
        i = bisect.bisect_left(numbers, rel)
        if rel < 0 or (i < len(numbers) and numbers[i] == rel):
            return False
        row = (rel, first - self.first_base, last - first + 1, -(-ms // 1000) - self.time_base)
        done = []
        try:
            for column, value in zip(self._columns(), row):
                column.insert(i, value)
                done.append(column)
        except OverflowError:
            for column in done:
                del column[i]
            return False
        return True

    def _place(self, number: int, entry: DedupeEntry) -> None:
        """Put a key anywhere, its columns rebased or widened first if it does not fit."""
        row = self._row(number, entry)
        numbers = self.numbers
        i = bisect.bisect_left(numbers, row[0])
        same = i < len(numbers) and numbers[i] == row[0]
        for column, value in zip(self._columns(), row):
            if same:
                column[i] = value
            else:
                column.insert(i, value)

    def expire(self, now_ms: int, window_ms: int) -> None:
        """Forget the oldest keys written more than the window before `now_ms`, once
        SESSION_RING_SLACK of them are (one cut of the columns for many keys)."""
        times, cutoff = self.times, _cutoff(self, now_ms, window_ms)
        old = 0
        while old < len(times) and times[old] < cutoff:
            old += 1
        if old >= SESSION_RING_SLACK:
            self._forget(old)

    def _forget(self, oldest: int) -> None:
        """Forget the `oldest` first keys."""
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
        key). The keys' times are not kept: a restored ring takes each for its newest's,
        which keeps them at least as long."""
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
            ring.counts = _narrow(counts, "B", based=False)[1]
            ring.time_base = _seconds(newest_ms)
            ring.times = array("H", bytes(2 * len(numbers)))
        return session, ring


_WIDER = {"B": "H", "H": "I", "I": "Q"}


def _cutoff(ring: SessionRing, now_ms: int, window_ms: int) -> int:
    """The time offset below which a key of `ring` is older than the window: its time
    rounded up is, so the time itself is too."""
    return (now_ms - window_ms) // 1000 - ring.time_base


def _seconds(ms: int) -> int:
    """A time in whole seconds, rounded up."""
    return -(-ms // 1000)


def _fit(column: array, base: int, value: int) -> tuple[array, int, int]:
    """(column, base, value's offset): as they are when the value fits, else the column
    rebased on its lowest value (or the new one) and widened until every offset fits."""
    rel = value - base
    if 0 <= rel < 1 << (8 * column.itemsize):
        return column, base, rel
    low = min(base + min(column, default=rel), value)
    high = max(base + max(column, default=rel), value)
    typecode = column.typecode
    while high - low >= 1 << (8 * array(typecode).itemsize):
        typecode = _WIDER[typecode]
    return array(typecode, (v + base - low for v in column)), low, value - low


def _column(typecode: str, data: bytes, session: str) -> array:
    column = array(typecode)
    if not isinstance(data, bytes) or len(data) % column.itemsize:
        raise CorruptionError(f"the idempotency keys of session {session!r}: a column is "
                              f"not whole {column.itemsize}-byte numbers")
    column.frombytes(data)
    if sys.byteorder == "big":
        column.byteswap()
    return column


def _narrow(column: array, typecode: str, based: bool = True) -> tuple[int, array]:
    """(base, offsets from it) in the narrowest of `typecode` and the wider codes that
    holds them (`based` False: base 0)."""
    base = min(column) if based else 0
    while typecode != column.typecode and max(column) - base >= 1 << (
            8 * array(typecode).itemsize):
        typecode = _WIDER[typecode]
    return base, array(typecode, (v - base for v in column))


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
        """Drop the rings of sessions idle for the window; the others forget their keys
        older than it."""
        idle = []
        for name, ring in self.sessions.items():
            if now_ms - ring.newest_ms > window_ms:
                idle.append(name)
            else:
                ring.expire(now_ms, window_ms)
        for name in idle:
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
            # one copy of the session's name for all the topics it writes to
            ring = self.sessions[sys.intern(session)] = SessionRing()
        ring.put(number, entry, window_ms)

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
