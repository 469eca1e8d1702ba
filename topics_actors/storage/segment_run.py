"""Bulk decode of a run of sealed segment records straight into scan columns.

The per-record read (segment.read_record -> decode_frame) builds a NamedTuple, copies the
envelope and re-slices it per record; for the bulk readers (the shard's `scan`, the Spark
segment-file reader) that is most of the cost. Here a run of consecutive seqs of one
segment is decoded in one loop: the .idx entries of the run come from one array('I') pass,
the frames are cut out of one copy of the .data bytes they span, and each live record's
`data` is appended to the columns a `scan` reply carries (packed seqs and timestamps, the
concatenated data texts and their int32 end offsets, tags, nodes).

Every check of decode_frame still runs per record: the frame holds the expected seq, its
length agrees with the .idx entry, its section lengths add up, its xxh3 checksum matches
(unless `verify` is off), node and tag are UTF-8. A batch frame (segment_batch.py) is
checked once, whole, and its records are taken together where none is skipped. A damaged
record is a CorruptionError, never served, never skipped.
"""

from __future__ import annotations

import struct
from array import array
from itertools import count, repeat

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.record_envelope import PLAIN_DATA
from topics_actors.record_envelope import data as envelope_data
from topics_actors.storage import segment_batch
from topics_actors.storage.frame_types import FLAG_META
from topics_actors.storage.segment import (
    DATA_HEADER, DATA_HEADER_BYTES, DEL_DELETED, FLAG_BATCH,
)

_TAIL = struct.Struct("<QB")                       # checksum, del byte
_TAIL_BYTES = _TAIL.size                           # 9
_FIXED = DATA_HEADER_BYTES + _TAIL_BYTES           # a frame's bytes besides its sections
_digest = xxhash.xxh3_64_intdigest


class Columns:
    """The column layout of a `scan` reply, filled record by record."""

    __slots__ = ("seqs", "stamps", "data", "offsets", "tags", "nodes")

    def __init__(self):
        self.seqs, self.stamps, self.offsets = array("q"), array("q"), array("i", (0,))
        self.data, self.tags, self.nodes = bytearray(), [], []


def decode_run(view, base: int, offsets: array, lengths: array, lo: int, cols: Columns,
               where: str, verify: bool = True, skip=(), ts_min: int = -1,
               budget: int = 1 << 62, check_deleted: bool = False,
               flags: array | None = None) -> int:
    """Decode the frames of seqs lo, lo + 1, ... (their .idx offsets, lengths and flags
    given; `view` holds the .data bytes from offset `base` on, whole frames) into `cols`.
    Passed over silently: seqs in `skip` (not even read), records whose del byte is set
    (after their checksum when `check_deleted`, as the shard's per-record read does),
    records older than `ts_min` ms. Stops before a record that would take the data past
    `budget` bytes (unless `cols` is still empty). Returns the last seq consumed."""
    if lengths and min(lengths) < _FIXED:
        raise CorruptionError(f"{where}: an .idx entry of seqs from {lo} is too short")
    args = (cols, where, verify, skip, ts_min, budget, check_deleted)
    if flags is None or not any(map(FLAG_BATCH.__and__, flags)):
        return _decode_frames(view, base, offsets, lengths, lo, *args)[0]
    last, i, total = lo - 1, 0, len(offsets)
    while i < total:
        if flags[i] & FLAG_BATCH:           # a batch frame: its records in this run at once
            batch = _batch(view, offsets[i] - base, where, verify)
            taken, stopped = _from_batch(view, batch, lo + i, lengths[i], lo + total, cols,
                                         ts_min, budget, skip, where)
        else:                               # record frames up to the next batch frame
            j = next((k for k in range(i, total) if flags[k] & FLAG_BATCH), total)
            taken, stopped = _decode_frames(view, base, offsets[i:j], lengths[i:j], lo + i,
                                            *args)
        last = max(last, taken)
        if stopped:
            break
        i = taken - lo + 1
    return last


def _decode_frames(view, base: int, offsets: array, lengths: array, lo: int, cols: Columns,
                   where: str, verify: bool, skip, ts_min: int, budget: int,
                   check_deleted: bool) -> tuple[int, bool]:
    """decode_run for record frames: (the last seq consumed, whether the budget stopped
    it)."""
    seqs, stamps, data, ends, tags, nodes = (cols.seqs, cols.stamps, cols.data, cols.offsets,
                                             cols.tags, cols.nodes)
    unpack, tail, digest = DATA_HEADER.unpack_from, _TAIL.unpack_from, _digest
    texts: dict = {}                   # tag bytes -> str: a run's tags repeat
    last = lo - 1
    for seq, at, length in zip(count(lo), offsets, lengths):
        if seq in skip:
            last = seq
            continue
        at -= base
        check_at = at + length - _TAIL_BYTES
        frame_len, flags, frame_seq, ts, node_len, tag_len, data_len = unpack(view, at)
        check, dead = tail(view, check_at)
        if (frame_seq != seq or frame_len + 4 != length
                or _FIXED + node_len + tag_len + data_len != length):
            raise CorruptionError(f"{where}: the frame at offset {at + base} is not the "
                                  f"record of seq {seq} its .idx entry points at",
                                  detail={"seq": seq})
        if dead == DEL_DELETED and not check_deleted:
            last = seq
            continue
        if verify and digest(view[at + 4:check_at]) != check:
            raise CorruptionError(f"{where}: checksum mismatch at seq {seq}", detail={"seq": seq})
        if dead == DEL_DELETED or ts < ts_min:
            last = seq
            continue
        pos = at + DATA_HEADER_BYTES + node_len + tag_len
        envelope = view[pos:pos + data_len]
        # record_envelope.data, with its common case inlined: a call per record costs the
        # bulk decode 10%
        payload = envelope_data(envelope, True) if flags & FLAG_META else envelope[PLAIN_DATA]
        if len(data) + len(payload) > budget and tags:
            return last, True
        try:
            if tag_len:
                raw = view[pos - tag_len:pos]
                tag = texts.get(raw)
                if tag is None:
                    tag = texts[bytes(raw)] = str(raw, "utf-8")
                tags.append(tag)
            else:
                tags.append(None)
            nodes.append(str(view[pos - tag_len - node_len:pos - tag_len], "utf-8")
                         if node_len else None)
        except UnicodeDecodeError:
            raise CorruptionError(f"{where}: node or tag of seq {seq} is not UTF-8",
                                  detail={"seq": seq}) from None
        last = seq
        data += payload
        ends.append(len(data))
        seqs.append(seq)
        stamps.append(ts)
    return last, False


def _batch(view, at: int, where: str, verify: bool) -> segment_batch.Batch:
    try:
        return segment_batch.decode(view, at, len(view), verify)
    except CorruptionError as error:
        raise CorruptionError(f"{where}: {error.message}") from None


def _from_batch(view, batch: segment_batch.Batch, seq: int, length: int, end_seq: int,
                cols: Columns, ts_min: int, budget: int, skip,
                where: str) -> tuple[int, bool]:
    """decode_run for the records of `batch` from `seq` on, before `end_seq`: all at once
    when none is deleted or skipped and they fit the budget, else one by one. Returns (the
    last seq consumed, whether the budget stopped it)."""
    try:
        index = segment_batch.index_of(batch, seq, length)
    except CorruptionError as error:
        raise CorruptionError(f"{where}: {error.message}", detail={"seq": seq}) from None
    taken = min(batch.count, index + end_seq - seq) - index
    seqs = range(seq, seq + taken)
    if batch.ts < ts_min:
        return seqs[-1], False
    start = batch.span(index)[0]
    total = batch.ends[index + taken - 1] + batch.texts_at - start
    dels = bytes(view[batch.dels_at + index:batch.dels_at + index + taken])
    data = cols.data
    if (DEL_DELETED not in dels and not (skip and any(s in skip for s in seqs))
            and (len(data) + total <= budget or not cols.tags)):
        base = len(data) - start + batch.texts_at
        data += view[start:start + total]
        cols.offsets.extend(array("i", map(base.__add__, batch.ends[index:index + taken])))
        cols.seqs.extend(seqs)
        cols.stamps.extend(array("q", (batch.ts,)) * taken)
        cols.tags.extend(repeat(None, taken))
        cols.nodes.extend(repeat(batch.node, taken))
        return seqs[-1], False
    last = seq - 1
    for k, record_seq in enumerate(seqs):
        if dels[k] == DEL_DELETED or record_seq in skip:
            last = record_seq
            continue
        text_start, text_end = batch.span(index + k)
        if len(data) + text_end - text_start > budget and cols.tags:
            return last, True
        data += view[text_start:text_end]
        cols.offsets.append(len(data))
        cols.seqs.append(record_seq)
        cols.stamps.append(batch.ts)
        cols.tags.append(None)
        cols.nodes.append(batch.node)
        last = record_seq
    return last, False
