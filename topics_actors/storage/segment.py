"""Segment files, format v1 (spec/storage.md 1.4, 1.5): one topic's absorbed records.

    <data>/topics/<topic dir>/seg-<first_seq:016>.data   frames, seq order, dense
    <data>/topics/<topic dir>/seg-<first_seq:016>.idx    20 bytes per record

The .data holds record frames (below) and batch frames (the records of an AppendBatch,
segment_batch.py, marked by FLAG_BATCH in their flags and their records' entries); the byte
layout both share is segment_layout.py's.

.data record frame:
    off size field
     0   4  frame_len u32   bytes after this field, including the trailing del byte
     4   1  flags     u8    bit0 has_tag, bit1 has_node, bit3 has_meta, bits 4-7 router hops
                           (ours, as in the WAL)
     5   8  seq       u64
    13   8  ts        u64   ms
    21   2  node_len  u16
    23   2  tag_len   u16
    25   4  data_len  u32   the {"d":..,"m":..} envelope of the WAL Append
    29      node | tag | data
     .   8  xxh3_64 over [4, checksum_start)
     .   1  del       u8    0x00 live, 0xD5 deleted (outside the checksum: flipped in place)

.idx entry: u32 offset, u32 len (whole frame incl. prefix and del byte; a batch frame's
record: through its own del byte), u64 ts, u8 flags, 3 zero bytes. The entry of seq s sits
at (s - first_seq) * 20, so no search is needed.

Only the compactor writes segments. A segment is appended to until it is sealed; the
snapshot records how many entries of each segment are valid, so bytes past that count (a
crashed compactor's tail) are never read, and the next flush overwrites them. A segment
file never shrinks: a shard may have it mapped, and touching a mapped page past the end of
a file kills the process (SIGBUS).
"""

from __future__ import annotations

import os
import re
import struct
import sys
from array import array
from collections import OrderedDict
from itertools import accumulate, chain, repeat
from operator import add, sub
from typing import NamedTuple

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint
from topics_actors.record_envelope import build as build_envelope
from topics_actors.storage import batch_frame, segment_batch
from topics_actors.storage.frame import HEADER, HEADER_BYTES, batch_body_at, sized_struct
from topics_actors.storage.frame_types import FLAG_META, FLAG_NODE, FLAG_TAG, HOPS_MASK
from topics_actors.storage.fs import Fs, FsFile
from topics_actors.storage.segment_layout import (  # noqa: F401  (the names readers import)
    CHECKSUM, DATA_FRAME_LEN_MIN, DATA_HEADER, DATA_HEADER_BYTES, DEL_DELETED, DEL_LIVE,
    FLAG_BATCH, IDX_ENTRY, IDX_ENTRY_BYTES, SEGMENT_FLAGS, SEGMENT_FORMAT_VERSION,
)

_CHECKSUM = CHECKSUM
_TAIL = struct.Struct("<QB")                  # checksum, del byte
_U32 = struct.Struct("<I")
_WAL_SEQ_AT = 14                              # offset of seq in a WAL frame
_PLAIN_FRAMES: dict[int, struct.Struct] = {}  # data_len -> packer of header + data
_SEGMENT_RE = re.compile(r"seg-(\d{16})\.(data|idx)")
_digest = xxhash.xxh3_64_intdigest
IDLE_SWEEP_NS = 10 * 10**9         # a mapped segment unread this long (to twice it) goes
SEGMENT_MAPS_MAX = 256    # a shard's mapped segments at most: 2 descriptors each (mmap dups)
assert array("I").itemsize == 4     # index_words reads .idx entries as five u32 words


class SegmentRecord(NamedTuple):
    seq: int
    ts: int
    flags: int
    node: str | None
    tag: str | None
    envelope: bytes
    deleted: bool


def topic_dir(data_dir: str, relative: str) -> str:
    """The absolute segment directory of a snapshot's `dir` entry ("" when it has none)."""
    return os.path.join(data_dir, relative) if relative else ""


def segment_stem(first_seq: int) -> str:
    return f"seg-{first_seq:016d}"


def data_path(topic_dir: str, first_seq: int) -> str:
    return os.path.join(topic_dir, segment_stem(first_seq) + ".data")


def idx_path(topic_dir: str, first_seq: int) -> str:
    return os.path.join(topic_dir, segment_stem(first_seq) + ".idx")


def list_segment_files(fs: Fs, topic_dir: str) -> dict[int, set[str]]:
    """first_seq -> the parts present ("data", "idx"), transient .tmp files excluded."""
    found: dict[int, set[str]] = {}
    for name in fs.listdir(topic_dir):
        match = _SEGMENT_RE.fullmatch(name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(match.group(2))
    return found


# --- encoding ---------------------------------------------------------------------------------

def append_from_wal(data_buf: bytearray, idx_buf: bytearray, data_base: int, wal_view,
                    wal_offset: int) -> int:
    """Re-frame the (already validated) WAL Append frame at `wal_offset` as a segment frame
    at the end of `data_buf`, and add its .idx entry. `data_base` is the .data length before
    `data_buf`. Returns the record's seq. The sections are copied as they are."""
    (frame_len, _, flags, _, seq, ts, node_len, tag_len,
     data_len) = HEADER.unpack_from(wal_view, wal_offset)
    sections = wal_view[wal_offset + 38:wal_offset + 4 + frame_len - 8]
    return _append(data_buf, idx_buf, data_base, flags & SEGMENT_FLAGS, seq, ts, node_len,
                   tag_len, data_len, sections)


def encode_record(data_buf: bytearray, idx_buf: bytearray, data_base: int, flags: int,
                  seq: int, ts: int, node: bytes, tag: bytes, data: bytes) -> int:
    flags = ((flags & (FLAG_META | HOPS_MASK)) | (FLAG_TAG if tag else 0)
             | (FLAG_NODE if node else 0))
    return _append(data_buf, idx_buf, data_base, flags, seq, ts, len(node), len(tag),
                   len(data), node + tag + data)


def _append(data_buf, idx_buf, data_base, flags, seq, ts, node_len, tag_len, data_len,
            sections) -> int:
    offset = data_base + len(data_buf)
    frame_len = DATA_FRAME_LEN_MIN + node_len + tag_len + data_len
    start = len(data_buf)
    data_buf += DATA_HEADER.pack(frame_len, flags, seq, ts, node_len, tag_len, data_len)
    data_buf += sections
    data_buf += _CHECKSUM.pack(_digest(memoryview(data_buf)[start + 4:]))
    data_buf.append(DEL_LIVE)
    idx_buf += IDX_ENTRY.pack(offset, frame_len + 4, ts, flags)
    return seq


def _plain_frame(data_len: int) -> struct.Struct:
    """The packer of a segment frame's header and data for a record without node or tag."""
    return sized_struct(_PLAIN_FRAMES, "<IBQQHHI", data_len)


# --- decoding ---------------------------------------------------------------------------------

def idx_entry(idx_view, first_seq: int, seq: int) -> tuple[int, int, int, int]:
    """(offset, len, ts, flags) of `seq`; CorruptionError when the .idx does not hold it."""
    at = (seq - first_seq) * IDX_ENTRY_BYTES
    if seq < first_seq or at + IDX_ENTRY_BYTES > len(idx_view):
        raise CorruptionError(f"seq {seq} has no .idx entry (segment {first_seq})")
    return IDX_ENTRY.unpack_from(idx_view, at)


def decode_frame(view, offset: int, end: int | None = None) -> SegmentRecord:
    """The frame at `offset` of a .data view; CorruptionError (with the reason) on any
    failed check, so a damaged sealed record is reported, never served."""
    end = len(view) if end is None else end
    if offset + DATA_HEADER_BYTES > end:
        raise CorruptionError(f"frame at offset {offset} is cut short")
    (frame_len, flags, seq, ts, node_len, tag_len,
     data_len) = DATA_HEADER.unpack_from(view, offset)
    if frame_len < DATA_FRAME_LEN_MIN or offset + 4 + frame_len > end:
        raise CorruptionError(f"frame at offset {offset}: bad frame_len {frame_len}")
    if DATA_FRAME_LEN_MIN + node_len + tag_len + data_len != frame_len:
        raise CorruptionError(f"frame at offset {offset}: section lengths do not add up")
    check_at = offset + 4 + frame_len - 9
    if _digest(memoryview(view)[offset + 4:check_at]) != _CHECKSUM.unpack_from(view, check_at)[0]:
        raise CorruptionError(f"frame at offset {offset}: checksum mismatch")
    pos = offset + DATA_HEADER_BYTES
    try:
        node = bytes(view[pos:pos + node_len]).decode() if node_len else None
        pos += node_len
        tag = bytes(view[pos:pos + tag_len]).decode() if tag_len else None
    except UnicodeDecodeError:
        raise CorruptionError(f"frame at offset {offset}: node or tag is not UTF-8") from None
    pos += tag_len
    envelope = bytes(view[pos:pos + data_len])
    return SegmentRecord(seq, ts, flags, node, tag, envelope, view[check_at + 8] == DEL_DELETED)


def index_words(index: bytes) -> tuple[array, array]:
    """(offsets, lengths) of consecutive .idx entries, from one array pass."""
    words = array("I", index)
    if sys.byteorder == "big":
        words.byteswap()
    return words[0::5], words[1::5]


def index_flags(index: bytes) -> array:
    """The flags of consecutive .idx entries (the low byte of each fifth word)."""
    words = array("I", index)
    if sys.byteorder == "big":
        words.byteswap()
    return array("I", map((0xFF).__and__, words[4::5]))


def span(offsets: array, lengths: array) -> tuple[int, int]:
    """The .data byte range [start, end) holding every frame of a run."""
    return min(offsets), max(map(add, offsets, lengths))


def read_record(data_view, idx_view, first_seq: int, seq: int) -> SegmentRecord:
    offset, length, _, flags = idx_entry(idx_view, first_seq, seq)
    if offset + length > len(data_view):
        raise CorruptionError(f"seq {seq}: .idx entry points past the end of .data")
    if flags & FLAG_BATCH:
        batch = segment_batch.decode(data_view, offset, len(data_view))
        return batch_record(data_view, batch, length, seq)
    record = decode_frame(data_view, offset, offset + length)
    if record.seq != seq:
        raise CorruptionError(f"seq {seq}: the frame at offset {offset} holds seq {record.seq}")
    return record


def batch_record(data_view, batch: segment_batch.Batch, length: int,
                 seq: int) -> SegmentRecord:
    """Record `seq` (its .idx entry's length `length`) of a checked batch frame."""
    index = segment_batch.index_of(batch, seq, length)
    start, end = batch.span(index)
    return SegmentRecord(seq, batch.ts, batch.flags & SEGMENT_FLAGS, batch.node, None,
                         build_envelope(data_view[start:end], None),
                         segment_batch.deleted(data_view, batch, index))


def frame_end(data_view, offset: int, length: int, flags: int) -> int:
    """Where the frame of a record whose .idx entry is (offset, length, flags) ends: a batch
    frame may end after the record's del byte (its prefix says where)."""
    if flags & FLAG_BATCH and offset + 4 <= len(data_view):
        return offset + 4 + _U32.unpack_from(data_view, offset)[0]
    return offset + length


# --- writing (the compactor) ------------------------------------------------------------------

class OpenSegment:
    """The compactor's append handle on a topic's newest segment.

    add() buffers; spill() opens both files, writes the buffers after what is written
    already (at first, the lengths the last snapshot vouches for, over whatever a crashed
    run left there) and closes them; flush() spills, then fdatasyncs both (.data first, so
    an .idx entry never points at bytes that are not durable). The compactor thus holds no
    descriptor per topic between its writes, and memory only for what it has not spilled.
    Written but unsynced bytes lie past the lengths any snapshot lists: no reader reads
    them, and after a crash the next flush writes over them."""

    def __init__(self, fs: Fs, topic_dir: str, first_seq: int, data_len: int = 0,
                 count: int = 0):
        self.fs = fs
        self.topic_dir = topic_dir
        self.first_seq = first_seq
        self.data_len = data_len          # durable bytes of .data
        self.count = count                # durable entries of .idx
        self.written_len = data_len       # bytes of .data written (durable or not)
        self.written_count = count        # entries of .idx written
        self.data_buf = bytearray()
        self.idx_buf = bytearray()
        self.first_ts = 0
        self.next_seq = first_seq + count  # the seq the next add must carry
        self._data: FsFile | None = None
        self._idx: FsFile | None = None

    def open(self) -> None:
        """Open (create) both files; all or nothing, so a failed open is simply tried again
        by the next flush."""
        opened = []
        try:
            for path in (data_path(self.topic_dir, self.first_seq),
                         idx_path(self.topic_dir, self.first_seq)):
                opened.append(self.fs.open(path, create=True))
        except BaseException:
            for handle in opened:
                handle.close()
            raise
        self._data, self._idx = opened

    @property
    def pending_count(self) -> int:
        return self.written_count + len(self.idx_buf) // IDX_ENTRY_BYTES

    @property
    def pending_bytes(self) -> int:
        return self.written_len + len(self.data_buf)

    @property
    def buffered_bytes(self) -> int:
        return len(self.data_buf) + len(self.idx_buf)

    def add_from_wal(self, wal_view, wal_offset: int, ts: int) -> None:
        if self.next_seq == self.first_seq:
            self.first_ts = ts
        self.next_seq = 1 + append_from_wal(self.data_buf, self.idx_buf, self.written_len,
                                            wal_view, wal_offset)

    def add_plain(self, wal_view, wal_offset: int, flags: int, seq: int, ts: int,
                  data_len: int) -> None:
        """add_from_wal for an Append the WAL scan already unpacked and found plain (no node,
        no tag): the same bytes, in a third of the calls (the compactor's hottest path)."""
        if seq == self.first_seq:
            self.first_ts = ts
        flags &= SEGMENT_FLAGS
        start = wal_offset + HEADER_BYTES
        data = wal_view[start:start + data_len]
        frame = (_PLAIN_FRAMES.get(data_len) or _plain_frame(data_len)).pack(
            DATA_FRAME_LEN_MIN + data_len, flags, seq, ts, 0, 0, data_len,
            data if type(data) is bytes else bytes(data))
        data_buf = self.data_buf
        at = self.written_len + len(data_buf)
        data_buf += frame
        data_buf += _TAIL.pack(_digest(memoryview(frame)[4:]), DEL_LIVE)
        self.idx_buf += IDX_ENTRY.pack(at, DATA_FRAME_LEN_MIN + 4 + data_len, ts, flags)
        self.next_seq = seq + 1

    def add_run(self, wal_view, run, start: int, stop: int) -> None:
        """add_plain for records start..stop-1 of a run of plain Appends
        (ledger/append_run.py), in one pass. A segment frame's bytes from its flags to the
        end of its data are its flags byte and then the WAL frame's bytes from its seq on:
        the same fields in the same order."""
        offsets, lens, tss = run.offsets, run.lens, run.tss
        if start or stop < len(offsets):
            offsets, lens, tss = offsets[start:stop], lens[start:stop], tss[start:stop]
        seq = run.first_seq + start
        if seq == self.first_seq:
            self.first_ts = tss[0]
        flags = run.flags & SEGMENT_FLAGS
        spans = map(slice, map(add, offsets, repeat(_WAL_SEQ_AT)),
                    map(add, offsets, map(add, lens, repeat(HEADER_BYTES))))
        bodies = list(map(add, repeat(bytes((flags,))), map(wal_view.__getitem__, spans)))
        frame_lens = list(map(add, lens, repeat(DATA_FRAME_LEN_MIN)))
        tails = map(_TAIL.pack, map(_digest, bodies), repeat(DEL_LIVE))
        at = self.written_len + len(self.data_buf)
        self.data_buf += b"".join(chain.from_iterable(
            zip(map(_U32.pack, frame_lens), bodies, tails)))
        sizes = list(map(add, frame_lens, repeat(4)))
        self.idx_buf += b"".join(map(IDX_ENTRY.pack, accumulate(sizes, initial=at), sizes,
                                     tss, repeat(flags)))
        self.next_seq = seq + len(offsets)

    def add_batch(self, wal_view, batch, start: int, stop: int) -> None:
        """Records start..stop-1 of an AppendBatch frame (ledger/append_run.py) as one batch
        frame (segment_batch.py): its body's bytes as the WAL holds them when the records
        are the whole batch, else their texts and a table of their own."""
        seq, count = batch.first_seq + start, stop - start
        if seq == self.first_seq:
            self.first_ts = batch.ts
        at_node = batch.offset + HEADER_BYTES
        node = bytes(wal_view[at_node:at_node + batch.node_len])
        table, first, last = batch.table, batch.skip + start, batch.skip + stop
        if first == 0 and last == len(table):
            body_at = batch_body_at(batch.offset, batch.node_len)
            head, texts = b"", wal_view[body_at:batch.texts_at + table[-1]]
        else:
            base = table[first - 1] if first else 0
            head = batch_frame.head(array("I", map(sub, table[first:last], repeat(base))))
            texts = wal_view[batch.texts_at + base:batch.texts_at + table[last - 1]]
        self.add_texts(seq, batch.ts, batch.flags, node, head, texts, count)

    def add_texts(self, seq: int, ts: int, flags: int, node: bytes, head: bytes,
                  texts: bytes, count: int) -> None:
        """`count` records from `seq` as one batch frame: `head` + `texts` is its body."""
        segment_batch.encode(self.data_buf, self.idx_buf, self.written_len + len(self.data_buf),
                             flags, seq, ts, node, head, texts, count)
        self.next_seq = seq + count

    def delete_pending(self, seq: int) -> bool:
        """Mark `seq` deleted while its frame is still in the buffer (its del byte is
        written as 0xD5), saving a flush; False if `seq` is not in the buffer."""
        index = seq - self.first_seq - self.written_count
        if not 0 <= index < len(self.idx_buf) // IDX_ENTRY_BYTES:
            return False
        offset, length, _, _ = IDX_ENTRY.unpack_from(self.idx_buf, index * IDX_ENTRY_BYTES)
        self.data_buf[offset - self.written_len + length - 1] = DEL_DELETED
        return True

    def spill(self) -> None:
        """Write the buffers to the files, unsynced, and free them."""
        if not self.data_buf:
            return
        if self._data is None:
            self.open()
        try:
            self._data.write_all_at(self.data_buf, self.written_len)
            self._idx.write_all_at(self.idx_buf, self.written_count * IDX_ENTRY_BYTES)
        finally:
            self.close()
        self.written_len += len(self.data_buf)
        self.written_count += len(self.idx_buf) // IDX_ENTRY_BYTES
        self.data_buf.clear()
        self.idx_buf.clear()

    def flush(self) -> None:
        """Make everything added durable (the lengths a snapshot may list)."""
        self.spill()
        if self.written_len == self.data_len:
            self.open()                 # as before: an empty segment has its files
            self.close()
            return
        self.open()
        try:
            self._data.sync_data()
            failpoint.hit("segput::after_data_before_idx")
            self._idx.sync_data()
        finally:
            self.close()
        self.data_len, self.count = self.written_len, self.written_count

    def close(self) -> None:
        for handle in (self._data, self._idx):
            if handle is not None:
                handle.close()
        self._data = self._idx = None


def flip_deleted(fs: Fs, topic_dir: str, first_seq: int, seq: int) -> None:
    """Mark `seq` deleted in place: its del byte (outside the checksum) becomes 0xD5. Not
    synced here: the caller syncs each touched file once (sync_file)."""
    idx = fs.open_read(idx_path(topic_dir, first_seq))
    try:
        raw = idx.read_at(IDX_ENTRY_BYTES, (seq - first_seq) * IDX_ENTRY_BYTES)
    finally:
        idx.close()
    if len(raw) != IDX_ENTRY_BYTES:
        raise CorruptionError(f"seq {seq} has no .idx entry (segment {first_seq})")
    offset, length, _, _ = IDX_ENTRY.unpack(raw)
    handle = fs.open(data_path(topic_dir, first_seq))
    try:
        handle.write_all_at(bytes((DEL_DELETED,)), offset + length - 1)
    finally:
        handle.close()


class Cut(NamedTuple):
    """Where a segment is cut before a seq (a follower's cut, compactor/segment_ledger.py):
    the .data bytes and records kept whole, the ts of its first record, and the records of
    a batch frame the cut goes through that stay (`kept`: the arguments of
    OpenSegment.add_texts), to be written again."""
    data_len: int
    count: int
    first_ts: int
    kept: tuple | None


def cut_before(fs: Fs, topic_dir: str, first_seq: int, seq: int) -> Cut:
    """The cut of segment `first_seq` before `seq`."""
    idx = fs.map_read(idx_path(topic_dir, first_seq))
    try:
        offset, _, _, flags = idx_entry(idx, first_seq, seq)
        first_ts = idx_entry(idx, first_seq, first_seq)[2]
    finally:
        _close((idx,))
    if not flags & FLAG_BATCH:
        return Cut(offset, seq - first_seq, first_ts, None)
    data = fs.map_read(data_path(topic_dir, first_seq))
    try:
        batch = segment_batch.decode(data, offset, len(data))
        kept = seq - batch.first_seq
        if not kept:
            return Cut(offset, seq - first_seq, first_ts, None)
        head = batch_frame.head(batch.ends[:kept])
        texts = bytes(data[batch.texts_at:batch.texts_at + batch.ends[kept - 1]])
    finally:
        _close((data,))
    node = (batch.node or "").encode()
    return Cut(offset, batch.first_seq - first_seq, first_ts,
               (batch.first_seq, batch.ts, batch.flags, node, head, texts, kept))


def sync_file(fs: Fs, path: str) -> None:
    handle = fs.open(path)
    try:
        handle.sync_data()
    finally:
        handle.close()


# --- reading (the shards) ---------------------------------------------------------------------

class SegmentReader:
    """Maps segment files on demand: at most `max_open`, only those read since sweep_idle."""

    def __init__(self, fs: Fs, max_open: int = SEGMENT_MAPS_MAX, tiers=None):
        self.fs = fs
        self.max_open = max_open
        self.tiers = tiers       # segment_tier.Tiers: look in the cold tier too
        self._views: OrderedDict[tuple[str, int], tuple] = OrderedDict()
        self._used: set[tuple[str, int]] = set()    # the keys read since the last sweep
        self._next_sweep_ns = 0
        # each mapped segment's last checked batch frame (a diff page reads it one by one)
        self._batches: dict[tuple[str, int], segment_batch.Batch] = {}

    def _pair(self, topic_dir: str, first_seq: int, seq: int):
        key = (topic_dir, first_seq)
        pair = self._views.get(key)
        need = (seq - first_seq + 1) * IDX_ENTRY_BYTES
        if pair is None or len(pair[1]) < need:
            self.forget(topic_dir, first_seq)
            pair = self._map(topic_dir, first_seq)
            self._views[key] = pair
            while len(self._views) > self.max_open:
                old, evicted = self._views.popitem(last=False)
                self._batches.pop(old, None)
                self._used.discard(old)
                _close(evicted)
        else:
            self._views.move_to_end(key)
        self._used.add(key)
        return pair

    def _map(self, topic_dir: str, first_seq: int) -> tuple:
        """Map a segment's files: the hot tier's, else the cold tier's (a relocation may have
        moved it since the directory was listed)."""
        cold = self.tiers.cold_of(topic_dir) if self.tiers is not None else None
        for directory in (topic_dir, cold) if cold else (topic_dir,):
            try:
                return (self.fs.map_read(data_path(directory, first_seq)),
                        self.fs.map_read(idx_path(directory, first_seq)))
            except FileNotFoundError:
                continue
        raise CorruptionError(f"segment {segment_stem(first_seq)} of {topic_dir} is missing")

    def read(self, topic_dir: str, first_seq: int, seq: int) -> SegmentRecord:
        key = (topic_dir, first_seq)
        data_view, idx_view = self._pair(topic_dir, first_seq, seq)
        try:
            offset, length, _, flags = idx_entry(idx_view, first_seq, seq)
            if len(data_view) < frame_end(data_view, offset, length, flags):
                self.forget(topic_dir, first_seq)   # the open segment grew since it was mapped
                data_view, idx_view = self._pair(topic_dir, first_seq, seq)
            if not flags & FLAG_BATCH:
                return read_record(data_view, idx_view, first_seq, seq)
            batch = self._batches.get(key)
            if (batch is None or batch.offset != offset
                    or not segment_batch.unchanged(data_view, batch)):
                batch = self._batches[key] = segment_batch.decode(data_view, offset,
                                                                  len(data_view))
            return batch_record(data_view, batch, length, seq)
        except CorruptionError as error:
            raise CorruptionError(f"{topic_dir}/{segment_stem(first_seq)}: {error.message}",
                                  detail={"seq": seq}) from None

    def run(self, topic_dir: str, first_seq: int, lo: int, hi: int) -> tuple:
        """(offsets, lengths, flags, start, data): the .idx offsets, lengths and flags of
        seqs lo..hi of a segment, and a copy of the .data bytes from `start` that hold their
        frames, whole (for segment_run.decode_run)."""
        data_view, idx_view = self._pair(topic_dir, first_seq, hi)
        index = bytes(idx_view[(lo - first_seq) * IDX_ENTRY_BYTES:
                               (hi - first_seq + 1) * IDX_ENTRY_BYTES])
        if lo < first_seq or len(index) != (hi - lo + 1) * IDX_ENTRY_BYTES:
            raise CorruptionError(f"{topic_dir}/{segment_stem(first_seq)}: seqs {lo}..{hi} "
                                  f"have no .idx entries", detail={"seq": lo})
        offsets, lengths = index_words(index)
        flags = index_flags(index)
        start, end = span(offsets, lengths)
        end = max(end, frame_end(data_view, offsets[-1], lengths[-1], flags[-1]))
        if len(data_view) < end:
            self.forget(topic_dir, first_seq)   # the open segment grew since it was mapped
            data_view = self._pair(topic_dir, first_seq, hi)[0]
        if len(data_view) < end:
            raise CorruptionError(f"{topic_dir}/{segment_stem(first_seq)}: .idx entries of "
                                  f"seqs {lo}..{hi} point past the end of .data",
                                  detail={"seq": lo})
        return offsets, lengths, flags, start, bytes(data_view[start:end])

    def forget(self, topic_dir: str, first_seq: int) -> None:
        self._batches.pop((topic_dir, first_seq), None)
        self._used.discard((topic_dir, first_seq))     # so it holds mapped keys only
        pair = self._views.pop((topic_dir, first_seq), None)
        if pair is not None:
            _close(pair)

    def keep_only(self, keys: set[tuple[str, int]]) -> None:
        """Unmap the segments not in `keys` ((topic dir, first seq)), as dropped ones."""
        for key in [k for k in self._views if k not in keys]:
            self.forget(*key)

    def sweep_idle(self, now_ns: int) -> bool:
        """Every IDLE_SWEEP_NS: unmap the segments not read since the last sweep (True)."""
        if now_ns < self._next_sweep_ns:
            return False
        self._next_sweep_ns = now_ns + IDLE_SWEEP_NS
        used, self._used = self._used, set()
        for key in [k for k in self._views if k not in used]:
            self.forget(*key)
        return True

    def close(self) -> None:
        self._batches.clear()
        while self._views:
            _close(self._views.popitem()[1])


def _close(pair) -> None:
    for view in pair:
        if (close := getattr(view, "close", None)) is not None:
            close()
