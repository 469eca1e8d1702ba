"""The recovery check of one segment: every record a snapshot vouches for has an `.idx`
entry pointing into the durable `.data` at the place the dense layout puts it, and its
frame (a record frame, or the batch frame it shares with its batch: segment_batch.py)
passes its checks. Each fault comes with the fix a repair may apply, if any:

- `idx`: the `.idx` entry is wrong but the `.data` frame at its place is whole: the entry is
  rewritten from the frame (nothing is lost);
- `placeholder`: the frame fails its checks but its place and length are known: it is
  rewritten as a deleted record of the same length (that record is lost, its neighbours
  stay, and a deleted record is a hole every reader already skips); a batch frame, as a
  batch frame of the same length and count whose records are all deleted;
- None: neither is known (the rest of the segment cannot be located): no automatic repair.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint, segment_batch
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import (
    DATA_FRAME_LEN_MIN, DATA_HEADER, DEL_DELETED, FLAG_BATCH, IDX_ENTRY, IDX_ENTRY_BYTES,
    decode_frame, index_flags, index_words,
)

_CHECKSUM = struct.Struct("<Q")
_FRAME_MIN = DATA_FRAME_LEN_MIN + 4     # the smallest whole frame, prefix included
_digest = xxhash.xxh3_64_intdigest


class SegmentFault(NamedTuple):
    seq: int
    reason: str
    fix: str | None            # "idx", "placeholder" or None (see the module doc)
    offset: int                # the frame's place in .data
    length: int                # the frame's bytes (incl. prefix and del byte)
    ts: int
    flags: int


def audit(data, idx, first_seq: int, count: int, data_len: int) -> list[SegmentFault]:
    """Faults of the first `count` records, whose frames lie in `data[:data_len]`."""
    if _whole(data, idx, first_seq, count, min(data_len, len(data))):
        return []
    return _faults(data, idx, first_seq, count, data_len)


def _whole(data, idx, first_seq: int, count: int, limit: int) -> bool:
    """The quick pass of every start: dense entries inside the durable .data, each frame's
    length, seq, section lengths and checksum right. False at the first doubt (the slow
    pass then says what is wrong). The checksum covers node and tag, which were valid
    UTF-8 when written, so they are not decoded here."""
    if len(idx) < count * IDX_ENTRY_BYTES:
        return False
    index = bytes(idx[:count * IDX_ENTRY_BYTES])
    offsets, lengths = index_words(index)
    flags = index_flags(index)
    head, unpack_sum, digest = DATA_HEADER.unpack_from, _CHECKSUM.unpack_from, _digest
    expected, i, mv = 0, 0, memoryview(data)
    try:
        while i < count:
            offset, length = offsets[i], lengths[i]
            if offset != expected or offset + length > limit or length < _FRAME_MIN:
                return False
            if flags[i] & FLAG_BATCH:
                taken = _whole_batch(data, index, i, first_seq + i, count, limit)
                if not taken:
                    return False
                expected, i = offset + taken[1], i + taken[0]
                continue
            frame_len, _, frame_seq, _, node_len, tag_len, data_len = head(data, offset)
            check_at = offset + length - 9
            if (frame_len + 4 != length or frame_seq != first_seq + i
                    or DATA_FRAME_LEN_MIN + node_len + tag_len + data_len != frame_len
                    or digest(mv[offset + 4:check_at]) != unpack_sum(data, check_at)[0]):
                return False
            expected, i = offset + length, i + 1
    finally:
        mv.release()
    return True


def _batch_entries(batch: segment_batch.Batch) -> bytes:
    """The .idx entries a checked batch frame's records must have."""
    return segment_batch.entries(batch.offset, batch.total, batch.count, batch.ts,
                                 batch.flags)


def _whole_batch(data, index: bytes, i: int, seq: int, count: int,
                 limit: int) -> tuple[int, int] | None:
    """(records, bytes) of the batch frame whose first record is entry `i` (seq `seq`),
    when the frame checks and its records' entries are exactly what it implies; None at
    the first doubt."""
    offset = IDX_ENTRY.unpack_from(index, i * IDX_ENTRY_BYTES)[0]
    try:
        batch = segment_batch.decode(data, offset, limit)
    except CorruptionError:
        return None
    end = (i + batch.count) * IDX_ENTRY_BYTES
    if (batch.first_seq != seq or i + batch.count > count
            or index[i * IDX_ENTRY_BYTES:end] != _batch_entries(batch)):
        return None
    return batch.count, batch.total


def _faults(data, idx, first_seq: int, count: int, data_len: int) -> list[SegmentFault]:
    faults: list[SegmentFault] = []
    limit, expected, i = min(data_len, len(data)), 0, 0
    while i < count:
        seq = first_seq + i
        entry = _entry(idx, i)
        if _batch_at(data, expected, limit, entry):
            taken, found = _batch_faults(data, idx, i, seq, count, expected, limit)
            faults += found
            if any(fault.fix is None for fault in found):
                faults += [SegmentFault(s, "after an unlocatable record", None, 0, 0, 0, 0)
                           for s in range(seq + taken[0], first_seq + count)]
                return faults
            expected, i = expected + taken[1], i + taken[0]
            continue
        i += 1
        frame_len = _frame_len_at(data, expected, limit)
        record_ok = frame_len is not None and _decodes(data, expected, frame_len, seq)
        if entry is None or entry[:2] != (expected, frame_len) or not record_ok:
            fault = _fault(seq, entry, expected, frame_len, record_ok, limit)
            faults.append(fault)
            if fault.fix is None:
                faults += [SegmentFault(s, "after an unlocatable record", None, 0, 0, 0, 0)
                           for s in range(seq + 1, first_seq + count)]
                return faults
            expected += fault.length
            continue
        expected += frame_len
    return faults


def _batch_at(data, offset: int, limit: int, entry) -> bool:
    """Whether a batch frame is to be at `offset`: the .idx entry of the next record says
    so, or (that entry being wrong) a whole batch frame is there."""
    if entry is not None and entry[3] & FLAG_BATCH:
        return True
    try:
        segment_batch.decode(data, offset, limit)
    except CorruptionError:
        return False
    return True


def _batch_faults(data, idx, i: int, seq: int, count: int, offset: int,
                  limit: int) -> tuple[tuple[int, int], list[SegmentFault]]:
    """((records, bytes), faults) of the batch frame at `offset` whose first record is
    entry `i`: entries to rewrite from a whole frame, or, for a frame that fails its
    checks, a placeholder for all its records when its entries say how many there are and
    how long it is."""
    try:
        batch = segment_batch.decode(data, offset, limit)
    except CorruptionError:
        batch = None
    if batch is not None and batch.first_seq == seq and i + batch.count <= count:
        want = _batch_entries(batch)
        faults = []
        for k in range(batch.count):
            entry, right = _entry(idx, i + k), IDX_ENTRY.unpack_from(want, k * IDX_ENTRY_BYTES)
            if entry != right:
                faults.append(SegmentFault(seq + k, f".idx entry {entry} should be {right}",
                                           "idx", offset, right[1], right[2], right[3]))
        return (batch.count, batch.total), faults
    entries = []
    while i + len(entries) < count:
        entry = _entry(idx, i + len(entries))
        if entry is None or entry[0] != offset or not entry[3] & FLAG_BATCH:
            break
        entries.append(entry)
    total = entries[-1][1] if entries else 0
    if (entries and offset + total <= limit
            and segment_batch.placeholder(total, len(entries), seq, entries[0][2])):
        return (len(entries), total), [
            SegmentFault(seq + k, "batch frame fails its checks", "placeholder", offset, total,
                         entries[0][2], FLAG_BATCH) for k in range(len(entries))]
    return (1, 0), [SegmentFault(seq, "batch frame cannot be located", None, offset, 0, 0, 0)]


def _fault(seq, entry, expected, frame_len, record_ok, limit) -> SegmentFault:
    if record_ok:        # the frame is whole: only its entry is wrong
        reason = ("no .idx entry" if entry is None
                  else f".idx entry ({entry[0]}, {entry[1]}) should be ({expected}, "
                       f"{frame_len})")
        return SegmentFault(seq, reason, "idx", expected, frame_len, 0, 0)
    if entry is not None and entry[0] == expected and DATA_FRAME_LEN_MIN + 4 <= entry[1] \
            and expected + entry[1] <= limit:
        return SegmentFault(seq, "record fails its checks (checksum or header)",
                            "placeholder", expected, entry[1], entry[2], entry[3])
    where = "past the durable .data" if entry is not None else "and has no .idx entry"
    return SegmentFault(seq, f"record cannot be located ({where})", None, expected, 0, 0, 0)


def _entry(idx, i: int) -> tuple[int, int, int, int] | None:
    at = i * IDX_ENTRY_BYTES
    if at + IDX_ENTRY_BYTES > len(idx):
        return None
    return IDX_ENTRY.unpack_from(idx, at)


def _frame_len_at(data, offset: int, limit: int) -> int | None:
    """Total bytes of the frame at `offset` by its length prefix, if that fits."""
    if offset + 4 > limit:
        return None
    total = int.from_bytes(data[offset:offset + 4], "little") + 4
    if total < DATA_FRAME_LEN_MIN + 4 or offset + total > limit:
        return None
    return total


def _decodes(data, offset: int, total: int, seq: int) -> bool:
    try:
        return decode_frame(data, offset, offset + total).seq == seq
    except CorruptionError:
        return False


# --- repairs ----------------------------------------------------------------------------------

def placeholder(fault: SegmentFault, count: int = 1) -> bytes:
    """A deleted record of `fault.length` bytes at the fault's seq, ts and flags; for a
    batch frame's fault (its first record's), a batch frame of `count` deleted records."""
    if fault.flags & FLAG_BATCH:
        return segment_batch.placeholder(fault.length, count, fault.seq, fault.ts)
    data_len = fault.length - 4 - DATA_FRAME_LEN_MIN
    head = DATA_HEADER.pack(fault.length - 4, fault.flags, fault.seq, fault.ts, 0, 0, data_len)
    body = head + bytes(data_len)
    return body + _CHECKSUM.pack(_digest(body[4:])) + bytes((DEL_DELETED,))


def idx_entry_from(data, fault: SegmentFault) -> bytes:
    if data[fault.offset + 4] & FLAG_BATCH:
        batch = segment_batch.decode(data, fault.offset, len(data))
        at = (fault.seq - batch.first_seq) * IDX_ENTRY_BYTES
        return _batch_entries(batch)[at:at + IDX_ENTRY_BYTES]
    record = decode_frame(data, fault.offset, fault.offset + fault.length)
    return IDX_ENTRY.pack(fault.offset, fault.length, record.ts, record.flags)


def repair(fs: Fs, data_path: str, idx_path: str, first_seq: int,
           faults: list[SegmentFault]) -> None:
    """Apply every fault's fix in place and sync both files; CorruptionError when one has
    none (nothing is written then)."""
    if any(f.fix is None for f in faults):
        raise CorruptionError("a record of the segment cannot be located: restore it from a "
                              "backup", detail={"seq": min(f.seq for f in faults)})
    stand_ins: dict[int, list[SegmentFault]] = {}   # a batch frame's faults share its place
    for fault in faults:
        if fault.fix == "placeholder":
            stand_ins.setdefault(fault.offset, []).append(fault)
    data_fixes = [(offset, placeholder(group[0], len(group)))
                  for offset, group in stand_ins.items()]
    view = fs.map_read(data_path)
    try:
        idx_fixes = [((f.seq - first_seq) * IDX_ENTRY_BYTES, idx_entry_from(view, f))
                     for f in faults if f.fix == "idx"]
    finally:
        getattr(view, "close", lambda: None)()
    for path, fixes in ((data_path, data_fixes), (idx_path, idx_fixes)):
        if not fixes:
            continue
        handle = fs.open(path)
        try:
            for offset, raw in fixes:
                handle.write_all_at(raw, offset)
            failpoint.hit("repair::before_sync")
            handle.sync_data()
        finally:
            handle.close()

