"""The recovery check of one segment: every record a snapshot vouches for has an `.idx`
entry pointing into the durable `.data` at the place the dense layout puts it, and its
frame passes its checks. Each fault comes with the fix a repair may apply, if any:

- `idx`: the `.idx` entry is wrong but the `.data` frame at its place is whole: the entry is
  rewritten from the frame (nothing is lost);
- `placeholder`: the frame fails its checks but its place and length are known: it is
  rewritten as a deleted record of the same length (that record is lost, its neighbours
  stay, and a deleted record is a hole every reader already skips);
- None: neither is known (the rest of the segment cannot be located): no automatic repair.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import (
    DATA_FRAME_LEN_MIN, DATA_HEADER, DEL_DELETED, IDX_ENTRY,
    IDX_ENTRY_BYTES, decode_frame, index_words,
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
    offsets, lengths = index_words(bytes(idx[:count * IDX_ENTRY_BYTES]))
    head, unpack_sum, digest = DATA_HEADER.unpack_from, _CHECKSUM.unpack_from, _digest
    expected, seq, mv = 0, first_seq, memoryview(data)
    try:
        for offset, length in zip(offsets, lengths):
            if offset != expected or offset + length > limit or length < _FRAME_MIN:
                return False
            frame_len, _, frame_seq, _, node_len, tag_len, data_len = head(data, offset)
            check_at = offset + length - 9
            if (frame_len + 4 != length or frame_seq != seq
                    or DATA_FRAME_LEN_MIN + node_len + tag_len + data_len != frame_len
                    or digest(mv[offset + 4:check_at]) != unpack_sum(data, check_at)[0]):
                return False
            expected, seq = offset + length, seq + 1
    finally:
        mv.release()
    return True


def _faults(data, idx, first_seq: int, count: int, data_len: int) -> list[SegmentFault]:
    faults: list[SegmentFault] = []
    limit, expected = min(data_len, len(data)), 0
    for i in range(count):
        seq = first_seq + i
        entry = _entry(idx, i)
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

def placeholder(fault: SegmentFault) -> bytes:
    """A deleted record of `fault.length` bytes at the fault's seq, ts and flags."""
    data_len = fault.length - 4 - DATA_FRAME_LEN_MIN
    head = DATA_HEADER.pack(fault.length - 4, fault.flags, fault.seq, fault.ts, 0, 0, data_len)
    body = head + bytes(data_len)
    return body + _CHECKSUM.pack(_digest(body[4:])) + bytes((DEL_DELETED,))


def idx_entry_from(data, fault: SegmentFault) -> bytes:
    record = decode_frame(data, fault.offset, fault.offset + fault.length)
    return IDX_ENTRY.pack(fault.offset, fault.length, record.ts, record.flags)


def repair(fs: Fs, data_path: str, idx_path: str, first_seq: int,
           faults: list[SegmentFault]) -> None:
    """Apply every fault's fix in place and sync both files; CorruptionError when one has
    none (nothing is written then)."""
    if any(f.fix is None for f in faults):
        raise CorruptionError("a record of the segment cannot be located: restore it from a "
                              "backup", detail={"seq": min(f.seq for f in faults)})
    data_fixes = [(f.offset, placeholder(f)) for f in faults if f.fix == "placeholder"]
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

