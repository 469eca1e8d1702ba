"""Records of one topic that a reader of the log (the compactor, a shard's recovery) takes
in one step instead of one call per record: one publish, one segment write per segment.

- AppendRun: plain Append frames (no node, no tag, one flags byte) at consecutive seqs lying
  back to back (what a batch append wrote as separate frames). The frames are walked once
  for their headers and their checksums compared in one pass. Every frame is still checked
  as the per-frame path checks it; a run ends before the first frame that is not of it or
  does not check, and the per-frame path reads that one.
- AppendBatch: the records of one AppendBatch frame (storage/batch_frame.py), checked as a
  frame; it may begin inside the frame, where the topic's head already is.
"""

from __future__ import annotations

import struct
from array import array
from itertools import chain, repeat
from operator import add, itemgetter, sub

import xxhash

from topics_actors.record_envelope import has_meta, payloads_bytes
from topics_actors.storage import batch_frame
from topics_actors.storage.frame import HEADER, HEADER_BYTES, batch_body_at

RUN_FRAMES_MAX = 1024          # bounds the lists of a run and the segment buffer it grows
_CHECKSUM = struct.Struct("<Q")
_FIRST = itemgetter(0)
_digest = xxhash.xxh3_64_intdigest


class AppendRun:
    """Offsets, timestamps and data lengths of the frames of a run, in seq order."""

    __slots__ = ("first_seq", "flags", "offsets", "tss", "lens", "end")

    def __init__(self, first_seq: int, flags: int, offsets: list[int], tss: list[int],
                 lens: list[int], end: int):
        self.first_seq = first_seq
        self.flags = flags
        self.offsets = offsets
        self.tss = tss
        self.lens = lens
        self.end = end                 # the offset after the run's last frame

    @property
    def count(self) -> int:
        return len(self.offsets)

    @property
    def payload_bytes(self) -> int:
        """The API's byte accounting of the run's records (len(data) + len(meta))."""
        count = len(self.offsets)
        return payloads_bytes(sum(self.lens), count, count if has_meta(self.flags) else 0)


def gather(view, mv: memoryview, offset: int, end: int, first: tuple,
           limit: int) -> AppendRun | None:
    """The run that starts with the checked frame `first` = (its offset, topic id, seq, ts,
    flags, data_len), or None when the frame at `offset` (the next one) does not continue
    it. At most `limit` frames follow the first."""
    first_offset, tid, seq, first_ts, flags, first_len = first
    offsets = None      # made once a second frame joins: most single frames stay alone
    unpack, next_seq = HEADER.unpack_from, seq + 1
    while limit and end - offset >= HEADER_BYTES + 8:
        (frame_len, ftype, f_flags, f_tid, f_seq, ts,
         node_len, tag_len, data_len) = unpack(view, offset)
        if (ftype != 1 or f_tid != tid or f_seq != next_seq or f_flags != flags
                or node_len or tag_len or frame_len != 42 + data_len
                or offset + 4 + frame_len > end):
            break
        if offsets is None:
            offsets, tss, lens = [first_offset], [first_ts], [first_len]
        offsets.append(offset)
        tss.append(ts)
        lens.append(data_len)
        offset += 4 + frame_len
        next_seq += 1
        limit -= 1
    if offsets is None:
        return None
    good = _checked_prefix(view, mv, offsets, lens)
    if good == 1:
        return None
    if good < len(offsets):
        del offsets[good:], tss[good:], lens[good:]
    return AppendRun(seq, flags, offsets, tss, lens,
                     offsets[-1] + HEADER_BYTES + lens[-1] + 8)


def _checked_prefix(view, mv: memoryview, offsets: list[int], lens: list[int]) -> int:
    """How many frames from the first have a checksum that matches (the first is known
    to)."""
    check_ats = list(map(add, offsets, map(add, lens, repeat(HEADER_BYTES))))
    spans = map(slice, map(add, offsets, repeat(4)), check_ats)
    computed = list(map(_digest, map(mv.__getitem__, spans)))
    stored = list(map(_FIRST, map(_CHECKSUM.unpack_from, repeat(view), check_ats)))
    if computed == stored:
        return len(offsets)
    return next(i for i, (a, b) in enumerate(zip(computed, stored)) if a != b)


class AppendBatch:
    """The records of an AppendBatch frame from its record `skip` on (seq `first_seq`), all
    of time `ts`: `table` is the frame's table of where each text ends, relative to
    `texts_at` in the view of the log."""

    __slots__ = ("first_seq", "flags", "ts", "offset", "node_len", "table", "texts_at",
                 "skip")

    def __init__(self, first_seq: int, flags: int, ts: int, offset: int, node_len: int,
                 table: array, texts_at: int, skip: int):
        self.first_seq = first_seq
        self.flags = flags
        self.ts = ts
        self.offset = offset           # where the frame starts
        self.node_len = node_len
        self.table = table
        self.texts_at = texts_at
        self.skip = skip

    @property
    def count(self) -> int:
        return len(self.table) - self.skip

    def _start(self) -> int:
        return self.table[self.skip - 1] if self.skip else 0

    @property
    def payload_bytes(self) -> int:
        """The API's byte accounting of the records: their data."""
        return self.table[-1] - self._start()

    @property
    def lens(self) -> list[int]:
        """Each record's text length."""
        ends = self.table[self.skip:]
        return list(map(sub, ends, chain((self._start(),), ends)))

    @property
    def tss(self) -> list[int]:
        return [self.ts] * self.count

    def text_bytes(self, start: int, count: int) -> int:
        """The text bytes of `count` records from record `start` (of those taken)."""
        if count <= 0:
            return 0
        first, table = self.skip + start, self.table
        return table[first + count - 1] - (table[first - 1] if first else 0)


def batch_at(view, offset: int, seq: int, ts: int, flags: int, node_len: int,
             data_len: int, after: int) -> AppendBatch | None:
    """The records after seq `after` of the AppendBatch frame at `offset` whose header (the
    rest of the arguments) and checksum were checked; None when its body breaks a rule of
    batch_frame.py (the log ends at such a frame)."""
    if flags & ~batch_frame.FLAGS_ALLOWED:
        return None
    found = batch_frame.table(view, batch_body_at(offset, node_len), data_len)
    if found is None:
        return None
    table, texts_at = found
    skip = min(len(table), max(0, after + 1 - seq))
    return AppendBatch(seq + skip, flags, ts, offset, node_len, table, texts_at, skip)
