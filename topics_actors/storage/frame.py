"""WAL frame codec, format v2 (spec/storage.md 1.3), little-endian throughout.

    off size field
     0   4  frame_len u32   bytes after this field: header + sections + checksum
     4   1  type      u8
     5   1  flags     u8    bit0 has_tag, bit1 has_node, bit2 durable, bit3 has_meta
     6   8  topic_id  u64
    14   8  seq       u64
    22   8  ts        u64   ms
    30   2  node_len  u16
    32   2  tag_len   u16
    34   4  data_len  u32
    38      node | tag | data
     .   8  xxh3_64 over bytes [4, checksum_start)

bit3 (has_meta) is ours: it tells a reader which form an Append body (the record envelope,
topics_actors/record_envelope.py) has without parsing it. Type 12 (IdemKey) is ours too: it
makes idempotency keys survive a crash, and so is type 20 (AppendBatch: a batch of plain
records in one frame, its body laid out in batch_frame.py).
"""

from __future__ import annotations

import struct
from itertools import count
from typing import NamedTuple

import xxhash

from topics_actors.storage import batch_frame, frame_body
from topics_actors.storage.frame_types import (
    FLAG_NODE, FLAG_TAG, KNOWN_TYPES, FrameType,
)

HEADER = struct.Struct("<IBBQQQHHI")
HEADER_BYTES = HEADER.size            # 38
CHECKSUM = struct.Struct("<Q")
FRAME_LEN_MIN = HEADER_BYTES - 4 + 8  # 42: how the zeros after the log end stop a scan
FRAME_LEN_MAX = 1 << 31
WAL_FORMAT_VERSION = 2
APPEND_BATCH = int(FrameType.APPEND_BATCH)

_digest = xxhash.xxh3_64_intdigest


class Frame(NamedTuple):
    type: int
    flags: int
    topic_id: int
    seq: int
    ts: int
    node: str | None
    tag: str | None
    data: bytes
    offset: int      # where the frame starts in its file
    size: int        # total bytes including the length prefix


_FRAME_STRUCTS: dict[int, struct.Struct] = {}
_FRAME_STRUCTS_MAX = 4096


def sized_struct(cache: dict[int, struct.Struct], header: str, size: int) -> struct.Struct:
    """A Struct of `header` followed by `size` bytes, so a header and its sections are
    packed in one call; cached per size in `cache` (cleared when it holds 4096)."""
    st = cache.get(size)
    if st is None:
        if len(cache) >= _FRAME_STRUCTS_MAX:
            cache.clear()
        st = cache[size] = struct.Struct(f"{header}{size}s")
    return st


def _frame_struct(sections_len: int) -> struct.Struct:
    return sized_struct(_FRAME_STRUCTS, "<IBBQQQHHI", sections_len)


def encode(buf: bytearray, ftype: int, flags: int, topic_id: int, seq: int, ts: int,
           data: bytes, tag: bytes = b"", node: bytes = b"") -> int:
    """Append one frame to `buf`; returns its total size in bytes."""
    if tag:
        flags |= FLAG_TAG
    if node:
        flags |= FLAG_NODE
    sections = node + tag + data if node or tag else data
    size = len(sections)
    frame = _frame_struct(size).pack(42 + size, ftype, flags, topic_id, seq, ts,
                                     len(node), len(tag), len(data), sections)
    buf += frame
    buf += CHECKSUM.pack(_digest(frame[4:]))
    return size + 46


def encode_appends(buf: bytearray, topic_id: int, first_seq: int, ts: int, flags: int,
                   records) -> list[int]:
    """Append one Append frame per (envelope, tag, node, flags, ...) record, seqs from
    first_seq; returns each frame's offset in `buf`. The hot path of every write with tags,
    nodes or meta (encode_plain_appends is the one of plain records)."""
    offsets, seq, digest, pack_sum = [], first_seq, _digest, CHECKSUM.pack
    structs = _FRAME_STRUCTS
    for envelope, tag, node, record_flags, _ in records:
        offsets.append(len(buf))
        frame_flags = flags | record_flags
        if tag or node:
            frame_flags |= (FLAG_TAG if tag else 0) | (FLAG_NODE if node else 0)
            sections = node + tag + envelope
        else:
            sections = envelope
        size = len(sections)
        st = structs.get(size) or _frame_struct(size)
        frame = st.pack(42 + size, 1, frame_flags, topic_id, seq, ts,
                        len(node), len(tag), len(envelope), sections)
        buf += frame
        buf += pack_sum(digest(frame[4:]))   # a small copy beats two memoryviews
        seq += 1
    return offsets


def encode_plain_appends(buf: bytearray, topic_id: int, first_seq: int, ts: int, flags: int,
                         envelopes: list[bytes], node: bytes) -> list[int]:
    """encode_appends() for records with no tag and no meta that share one node (b"" for
    none), given as their envelopes: the same bytes, with less work per record (no tuple
    to unpack, no flag to work out, one copy of the batch's frames into `buf`)."""
    if node:
        flags |= FLAG_NODE
        sections_list = [node + envelope for envelope in envelopes]
    else:
        sections_list = envelopes
    offsets, parts, node_len, pos = [], [], len(node), len(buf)
    add, add_offset, structs, digest = parts.append, offsets.append, _FRAME_STRUCTS, _digest
    for sections, seq in zip(sections_list, count(first_seq)):
        size = len(sections)
        frame = (structs.get(size) or _frame_struct(size)).pack(
            42 + size, 1, flags, topic_id, seq, ts, node_len, 0, size - node_len, sections)
        add(frame)
        add(digest(frame[4:]).to_bytes(8, "little"))
        add_offset(pos)
        pos += size + 46
    buf += b"".join(parts)
    return offsets


def encode_batch(buf: bytearray, topic_id: int, first_seq: int, ts: int, flags: int,
                 node: bytes, texts: bytes, ends) -> int:
    """Append one AppendBatch frame (batch_frame.py) of the records `texts` split at `ends`
    (an array of u32) to `buf`; returns the frame's offset in `buf`."""
    if node:
        flags |= FLAG_NODE
    head = batch_frame.head(ends)
    body_len = len(head) + len(texts)
    frame = b"".join((HEADER.pack(42 + len(node) + body_len, APPEND_BATCH, flags, topic_id,
                                  first_seq, ts, len(node), 0, body_len), node, head, texts))
    at = len(buf)
    buf += frame
    buf += CHECKSUM.pack(_digest(memoryview(frame)[4:]))
    return at


def batch_body_at(offset: int, node_len: int) -> int:
    """Where the body of the AppendBatch frame at `offset` starts (after header and node)."""
    return offset + HEADER_BYTES + node_len


def encode_frame(ftype: int, topic_id: int = 0, seq: int = 0, ts: int = 0, data: bytes = b"",
                 tag: bytes = b"", node: bytes = b"", flags: int = 0) -> bytes:
    buf = bytearray()
    encode(buf, ftype, flags, topic_id, seq, ts, data, tag, node)
    return bytes(buf)


def decode_at(buf, offset: int, end: int) -> Frame | None:
    """Decode the frame at `offset`; None when it fails any check (the log ends there)."""
    if end - offset < 4 + FRAME_LEN_MIN:
        return None
    (frame_len, ftype, flags, topic_id, seq, ts,
     node_len, tag_len, data_len) = HEADER.unpack_from(buf, offset)
    if frame_len < FRAME_LEN_MIN or offset + 4 + frame_len > end:
        return None
    if 42 + node_len + tag_len + data_len != frame_len or ftype not in KNOWN_TYPES:
        return None
    check_at = offset + 4 + frame_len - 8
    if _digest(memoryview(buf)[offset + 4:check_at]) != CHECKSUM.unpack_from(buf, check_at)[0]:
        return None
    pos = offset + HEADER_BYTES
    try:
        node = bytes(buf[pos:pos + node_len]).decode() if node_len else None
        pos += node_len
        tag = bytes(buf[pos:pos + tag_len]).decode() if tag_len else None
    except UnicodeDecodeError:
        return None
    pos += tag_len
    data = bytes(buf[pos:pos + data_len])
    if ftype == APPEND_BATCH:
        if tag_len or not batch_frame.is_valid(flags, data):
            return None
    elif ftype != FrameType.APPEND and not body_is_valid(ftype, data):
        return None
    return Frame(ftype, flags, topic_id, seq, ts, node, tag, data, offset, 4 + frame_len)


def body_is_valid(ftype: int, data: bytes) -> bool:
    try:
        frame_body.decode_body(ftype, data)
    except (ValueError, struct.error, UnicodeDecodeError):
        return False
    return True
