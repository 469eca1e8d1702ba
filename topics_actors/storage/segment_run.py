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
(unless `verify` is off), node and tag are UTF-8. A damaged record is a CorruptionError,
never served, never skipped.
"""

from __future__ import annotations

import struct
from array import array
from itertools import count

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.record_envelope import PLAIN_DATA
from topics_actors.record_envelope import data as envelope_data
from topics_actors.storage.frame_types import FLAG_META
from topics_actors.storage.segment import DATA_HEADER, DATA_HEADER_BYTES, DEL_DELETED

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
               budget: int = 1 << 62, check_deleted: bool = False) -> int:
    """Decode the frames of seqs lo, lo + 1, ... (their .idx offsets and lengths given;
    `view` holds the .data bytes from offset `base` on) into `cols`. Passed over silently:
    seqs in `skip` (not even read), records whose del byte is set (after their checksum
    when `check_deleted`, as the shard's per-record read does), records older than
    `ts_min` ms. Stops before a record that would take the data past `budget` bytes (unless
    `cols` is still empty). Returns the last seq consumed."""
    seqs, stamps, data, ends, tags, nodes = (cols.seqs, cols.stamps, cols.data, cols.offsets,
                                             cols.tags, cols.nodes)
    unpack, tail, digest = DATA_HEADER.unpack_from, _TAIL.unpack_from, _digest
    if lengths and min(lengths) < _FIXED:
        raise CorruptionError(f"{where}: an .idx entry of seqs from {lo} is too short")
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
            break
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
    return last
