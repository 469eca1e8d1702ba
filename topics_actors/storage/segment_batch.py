"""A batch frame in a segment's `.data` (ours): the records of an AppendBatch WAL frame
(storage/batch_frame.py), absorbed with one header, one checksum and one copy of their
texts instead of a record frame each.

    off size field
     0   4  frame_len u32  bytes after this field, the del bytes included
     4   1  flags     u8   FLAG_BATCH, and has_node when the records have a node
     5   8  seq       u64  the first record's
    13   8  ts        u64  every record's
    21   2  node_len  u16
    23   2  tag_len   u16  0
    25   4  data_len  u32  the body's length
    29      node | body (u32 count, count x u32 end, texts: as in the WAL, batch_frame.py)
     .   8  xxh3_64 over [4, checksum_start)
     .   n  del bytes, record i's at checksum_start + 8 + i (0x00 live, 0xD5 deleted)

The .idx entry of record i: the frame's offset, a length that reaches through record i's
del byte (so a record's del byte is at offset + len - 1, as for a record frame), the ts,
and the flags with FLAG_BATCH. Record i is the envelope {"d":<text_i>}.
"""

from __future__ import annotations

import sys
from array import array
from typing import NamedTuple

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.storage import batch_frame
from topics_actors.storage.segment_layout import (
    CHECKSUM, DATA_HEADER, DATA_HEADER_BYTES, DEL_DELETED, FLAG_BATCH, IDX_ENTRY_BYTES,
)
from topics_actors.storage.frame_types import FLAG_NODE

OVERHEAD = DATA_HEADER_BYTES - 4 + 8          # 33: frame_len's share besides sections
RECORD_BYTES = 4 + 1                          # a record's besides its text: end, del byte
_digest = xxhash.xxh3_64_intdigest
_LITTLE = sys.byteorder == "little"


class Batch(NamedTuple):
    """A checked batch frame: where it is and what it holds."""
    offset: int
    total: int              # its bytes, prefix and del bytes included
    first_seq: int
    ts: int
    flags: int              # FLAG_BATCH and has_node
    node: str | None
    ends: array             # where each text ends, from `texts_at`
    texts_at: int
    dels_at: int            # record i's del byte: dels_at + i
    checksum: int

    @property
    def count(self) -> int:
        return len(self.ends)

    def span(self, index: int) -> tuple[int, int]:
        """(start, end) of record `index`'s text."""
        ends = self.ends
        return self.texts_at + (ends[index - 1] if index else 0), self.texts_at + ends[index]


def encode(data_buf: bytearray, idx_buf: bytearray, at: int, flags: int, seq: int, ts: int,
           node: bytes, head: bytes, texts: bytes, count: int) -> None:
    """Append the frame of `count` records (body = `head`, the count and table, then
    `texts`) to `data_buf`, where it lies at .data offset `at`, and their .idx entries to
    `idx_buf`."""
    body_len = len(head) + len(texts)
    frame_len = OVERHEAD + len(node) + body_len + count
    flags = (FLAG_NODE if node else 0) | FLAG_BATCH
    frame = b"".join((DATA_HEADER.pack(frame_len, flags, seq, ts, len(node), 0, body_len),
                      node, head, texts))
    data_buf += frame
    data_buf += CHECKSUM.pack(_digest(memoryview(frame)[4:]))
    data_buf += bytes(count)
    idx_buf += entries(at, 4 + frame_len, count, ts, flags)


def entries(offset: int, total: int, count: int, ts: int, flags: int) -> bytes:
    """The .idx entries of the `count` records of a batch frame of `total` bytes at
    `offset`, built as one array of u32 words (five per entry)."""
    words = array("I", bytes(IDX_ENTRY_BYTES * count))
    words[0::5] = array("I", (offset,)) * count
    words[1::5] = array("I", range(total - count + 1, total + 1))
    words[2::5] = array("I", (ts & 0xFFFFFFFF,)) * count
    words[3::5] = array("I", (ts >> 32,)) * count
    words[4::5] = array("I", (flags,)) * count
    if not _LITTLE:
        words.byteswap()
    return words.tobytes()


def decode(view, offset: int, limit: int, verify: bool = True) -> Batch:
    """The batch frame at `offset` of a .data view (of which `limit` bytes count), checked
    whole (its checksum unless `verify` is off): CorruptionError on any fault, so a damaged
    record is reported, never served."""
    if offset + DATA_HEADER_BYTES > limit:
        raise CorruptionError(f"batch frame at offset {offset} is cut short")
    (frame_len, flags, seq, ts, node_len, tag_len,
     body_len) = DATA_HEADER.unpack_from(view, offset)
    total = 4 + frame_len
    if not flags & FLAG_BATCH or tag_len or offset + total > limit:
        raise CorruptionError(f"batch frame at offset {offset}: bad header")
    body_at = offset + DATA_HEADER_BYTES + node_len
    found = batch_frame.table(view, body_at, body_len) if body_len < frame_len else None
    if found is None or OVERHEAD + node_len + body_len + len(found[0]) != frame_len:
        raise CorruptionError(f"batch frame at offset {offset}: lengths do not add up")
    check_at = body_at + body_len
    checksum = CHECKSUM.unpack_from(view, check_at)[0]
    if verify and _digest(memoryview(view)[offset + 4:check_at]) != checksum:
        raise CorruptionError(f"batch frame at offset {offset}: checksum mismatch")
    try:
        node = bytes(view[body_at - node_len:body_at]).decode() if node_len else None
    except UnicodeDecodeError:
        raise CorruptionError(f"batch frame at offset {offset}: node is not UTF-8") from None
    ends, texts_at = found
    return Batch(offset, total, seq, ts, flags, node, ends, texts_at, check_at + 8, checksum)


def unchanged(view, batch: Batch) -> bool:
    """Whether the frame a checked `batch` was read from is still the one at its place (a
    compactor may write a segment's tail again after a follower's cut)."""
    return (len(view) >= batch.offset + batch.total
            and CHECKSUM.unpack_from(view, batch.dels_at - 8)[0] == batch.checksum)


def index_of(batch: Batch, seq: int, length: int) -> int:
    """Where record `seq` is in the batch, checked against its .idx entry's length."""
    index = seq - batch.first_seq
    if not 0 <= index < batch.count:
        raise CorruptionError(f"seq {seq} is not in the batch frame at offset "
                              f"{batch.offset} (seqs {batch.first_seq}..)")
    if batch.dels_at + index + 1 - batch.offset != length:
        raise CorruptionError(f"seq {seq}: the .idx entry's length {length} does not reach "
                              "its del byte in the batch frame")
    return index


def deleted(view, batch: Batch, index: int) -> bool:
    return view[batch.dels_at + index] == DEL_DELETED


def placeholder(total: int, count: int, seq: int, ts: int) -> bytes | None:
    """A batch frame of `total` bytes whose `count` records are all deleted (a repair's
    stand-in for a damaged one whose .idx entries are kept), or None when `total` cannot
    hold `count` records."""
    texts_len = total - 4 - OVERHEAD - count - 4 - 4 * count
    if count < 1 or texts_len < count:
        return None
    ends = array("I", range(1, count)) + array("I", (texts_len,))
    head = batch_frame.head(ends)
    frame = (DATA_HEADER.pack(total - 4, FLAG_BATCH, seq, ts, 0, 0, len(head) + texts_len)
             + head + bytes(texts_len))
    return frame + CHECKSUM.pack(_digest(frame[4:])) + bytes((DEL_DELETED,)) * count
