"""Segment files v1 (spec/storage.md 1.4, 1.5; invariants 49-52): the byte layout, the WAL
re-framing, corruption detection, the compactor's OpenSegment and the shards' SegmentReader."""

from __future__ import annotations

import os
import pathlib
import random
import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors.errors import CorruptionError
from topics_actors.storage import segment as seg
from tools.testing.fault_fs import FaultFs
from topics_actors.storage.frame import encode_frame
from topics_actors.storage.frame_types import (
    FLAG_DURABLE, FLAG_META, FLAG_NODE, FLAG_TAG, FrameType,
)
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import OpenSegment, SegmentReader, SegmentRecord

FIRST = 100
# (flags, ts, node, tag, data) of seqs FIRST, FIRST + 1, ...
SAMPLE = [
    (0, 1000, b"", b"", b'{"d":1}'),
    (FLAG_META, 1001, b"node-a", b"", b'{"d":2,"m":{"k":"v"}}'),
    (0, 1002, b"", "t\u00e9g".encode(), b'{"d":[3]}'),
    (FLAG_META, 2**64 - 1, b"n", b"t", b'{"d":"x","m":1}'),
    (0, 0, b"", b"", b""),
]


def build(records, first: int = FIRST) -> tuple[bytes, bytes]:
    """.data and .idx of `records`, seqs from `first`."""
    data, idx = bytearray(), bytearray()
    for i, (flags, ts, node, tag, payload) in enumerate(records):
        assert seg.encode_record(data, idx, 0, flags, first + i, ts, node, tag,
                                 payload) == first + i
    return bytes(data), bytes(idx)


def expected(seq: int, flags: int, ts: int, node: bytes, tag: bytes, data: bytes,
             deleted: bool = False) -> SegmentRecord:
    flags = (flags & FLAG_META) | (FLAG_TAG if tag else 0) | (FLAG_NODE if node else 0)
    return SegmentRecord(seq, ts, flags, node.decode() or None, tag.decode() or None, data,
                         deleted)


def reseal(buf: bytearray, offset: int = 0) -> None:
    """Recompute the checksum of the frame at `offset` after a deliberate header edit."""
    frame_len = struct.unpack_from("<I", buf, offset)[0]
    check_at = offset + 4 + frame_len - 9
    struct.pack_into("<Q", buf, check_at, xxhash.xxh3_64_intdigest(bytes(buf[offset + 4:check_at])))


def wal_append(seq: int, ts: int = 0, data: bytes = b'{"d":1}', tag: bytes = b"",
               node: bytes = b"", flags: int = 0) -> bytes:
    return encode_frame(FrameType.APPEND, 7, seq, ts, data, tag, node, flags)


def wal_record(seq: int) -> tuple[int, int, bytes, bytes, bytes]:
    """The (flags, ts, node, tag, data) the OpenSegment tests log for `seq`."""
    return (FLAG_META if seq % 3 == 0 else 0, 5000 + seq, b"node" if seq % 2 else b"",
            b"tag-%d" % seq if seq % 4 == 0 else b"", b'{"d":{"n":%d}}' % seq)


def add(segment: OpenSegment, first: int, count: int) -> None:
    """Log seqs first.. as WAL Append frames (durable bit set) and feed them to `segment`."""
    buf, offsets = bytearray(), []
    for seq in range(first, first + count):
        flags, ts, node, tag, data = wal_record(seq)
        offsets.append(len(buf))
        buf += wal_append(seq, ts, data, tag, node, flags | FLAG_DURABLE)
    view = memoryview(bytes(buf))
    for seq, offset in zip(range(first, first + count), offsets):
        segment.add_from_wal(view, offset, wal_record(seq)[1])


def read_files(topic_dir: str, first: int) -> tuple[bytes, bytes]:
    paths = seg.data_path(topic_dir, first), seg.idx_path(topic_dir, first)
    return tuple(pathlib.Path(path).read_bytes() for path in paths)


def assert_segment_holds(topic_dir: str, first: int, seqs, exact: bool = True) -> None:
    """The files hold exactly `seqs`; with exact=False a crashed run's bytes may follow them
    (files never shrink; the snapshot's count says where the valid part ends)."""
    data, idx = read_files(topic_dir, first)
    want_data, want_idx = build([wal_record(s) for s in seqs], first)
    if not exact:
        data, idx = data[:len(want_data)], idx[:len(want_idx)]
    assert len(idx) == len(seqs) * seg.IDX_ENTRY_BYTES
    for seq in seqs:
        assert seg.read_record(data, idx, first, seq) == expected(seq, *wal_record(seq))
    assert (data, idx) == (want_data, want_idx)


# --- byte layout ------------------------------------------------------------------------------

def test_constants():
    assert (seg.SEGMENT_FORMAT_VERSION, seg.DATA_HEADER_BYTES, seg.IDX_ENTRY_BYTES,
            seg.DATA_FRAME_LEN_MIN, seg.DEL_LIVE, seg.DEL_DELETED) == (1, 29, 20, 34, 0, 0xD5)


def test_record_byte_layout():
    data, idx = bytearray(b"\xee" * 7), bytearray(b"\xee" * 20)   # earlier bytes stay put
    body = b"nd" + b"tg" + b'{"d":7}'
    seg.encode_record(data, idx, 500, FLAG_META | FLAG_DURABLE | 0x80, 42, 1234, b"nd", b"tg",
                      b'{"d":7}')
    frame = bytes(data[7:])
    assert data[:7] == b"\xee" * 7 and idx[:20] == b"\xee" * 20
    assert len(frame) == 38 + len(body)                       # 38 bytes overhead per record
    assert struct.unpack_from("<I", frame)[0] == len(frame) - 4 == 34 + len(body)
    # the durable bit is not kept; the router hops (bits 4-7, here 8) are
    flags = FLAG_META | FLAG_TAG | FLAG_NODE | 0x80
    assert struct.unpack_from("<BQQHHI", frame, 4) == (flags, 42, 1234, 2, 2, 7)
    assert frame[29:29 + len(body)] == body
    checksum = struct.unpack_from("<Q", frame, 29 + len(body))[0]
    assert checksum == xxhash.xxh3_64_intdigest(frame[4:29 + len(body)])
    assert frame[-1] == 0x00 and 29 + len(body) + 8 == len(frame) - 1
    entry = bytes(idx[20:])
    assert len(entry) == 20
    assert struct.unpack("<IIQB3s", entry) == (507, len(frame), 1234, flags, b"\0\0\0")


def test_empty_record_is_the_minimum_frame():
    data, idx = bytearray(), bytearray()
    seg.encode_record(data, idx, 0, 0, 1, 0, b"", b"", b"")
    assert len(data) == 38 and struct.unpack_from("<I", data)[0] == seg.DATA_FRAME_LEN_MIN
    assert data[4] == 0
    assert seg.read_record(data, idx, 1, 1) == SegmentRecord(1, 0, 0, None, None, b"", False)


WAL_CASES = [
    (b"", b"", 0),
    (b"", b"", FLAG_DURABLE),
    (b"tag", b"", FLAG_META),
    (b"", b"node-\xc3\xa9", FLAG_DURABLE | FLAG_META),
    (b"t", b"n", FLAG_DURABLE | FLAG_META),
    (b"t" * 300, b"n" * 200, FLAG_DURABLE),
]


@pytest.mark.parametrize("tag,node,wal_flags", WAL_CASES, ids=range(len(WAL_CASES)))
def test_append_from_wal_matches_encode_record(tag, node, wal_flags):
    payload = b'{"d":{"a":[1,2,3]},"m":{"x":1}}'
    prefix = wal_append(1) + wal_append(2, data=b"x" * 33)
    wal = memoryview(prefix + wal_append(9, 777, payload, tag, node, wal_flags) + wal_append(10))
    from_wal = bytearray(b"\x01" * 3), bytearray()
    direct = bytearray(b"\x01" * 3), bytearray()
    assert seg.append_from_wal(*from_wal, 64, wal, len(prefix)) == 9
    seg.encode_record(*direct, 64, wal_flags, 9, 777, node, tag, payload)
    assert from_wal == direct
    assert from_wal[0][3 + 4] & FLAG_DURABLE == 0                 # WAL bit2 is not copied
    assert from_wal[0][3 + 4] & FLAG_META == wal_flags & FLAG_META
    assert seg.idx_entry(from_wal[1], 9, 9)[0] == 64 + 3
    record = seg.decode_frame(from_wal[0], 3)
    assert record == expected(9, wal_flags, 777, node, tag, payload)


# --- round trips ------------------------------------------------------------------------------

RECORDS = st.tuples(st.sampled_from([0, FLAG_META, FLAG_META | FLAG_DURABLE]),
                    st.integers(0, 2**64 - 1),
                    st.text(max_size=12).map(str.encode), st.text(max_size=12).map(str.encode),
                    st.binary(max_size=120))


@settings(max_examples=80, deadline=None, database=None)
@given(st.lists(RECORDS, min_size=1, max_size=16), st.integers(0, 2**63))
def test_round_trip(records, first):
    data, idx = build(records, first)
    assert len(idx) == 20 * len(records)
    offset = 0
    for i, record in enumerate(records):
        seq = first + i
        entry = seg.idx_entry(idx, first, seq)
        assert entry == seg.IDX_ENTRY.unpack_from(idx, i * 20)     # seq -> entry is arithmetic
        assert entry[:3] == (offset, 38 + sum(map(len, record[2:])), record[1])
        offset += entry[1]
        assert seg.read_record(data, idx, first, seq) == expected(seq, *record)
    assert offset == len(data)
    for missing in (first + len(records), first - 1):
        with pytest.raises(CorruptionError):
            seg.read_record(data, idx, first, missing)


# --- corruption -------------------------------------------------------------------------------

def test_any_flipped_byte_of_a_frame_is_corruption_and_stays_local():
    data, idx = build(SAMPLE)
    offset, length, _, _ = seg.idx_entry(idx, FIRST, FIRST + 1)
    for at in range(offset, offset + length - 1):                 # all but the del byte
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[at] ^= mask
            with pytest.raises(CorruptionError):
                seg.read_record(damaged, idx, FIRST, FIRST + 1)
            for i in (0, 2, 3, 4):                                # neighbours still read
                assert seg.read_record(damaged, idx, FIRST, FIRST + i) == \
                    expected(FIRST + i, *SAMPLE[i])


def test_del_byte_is_outside_the_checksum():
    data, idx = build(SAMPLE)
    for i, record in enumerate(SAMPLE):
        offset, length, _, _ = seg.idx_entry(idx, FIRST, FIRST + i)
        for value in range(256):
            damaged = bytearray(data)
            damaged[offset + length - 1] = value
            got = seg.read_record(damaged, idx, FIRST, FIRST + i)
            assert got == expected(FIRST + i, *record, deleted=value == seg.DEL_DELETED)
        damaged = bytearray(data)
        damaged[offset + length - 1] = seg.DEL_DELETED
        damaged[offset + 5] ^= 0x01                       # deleted only if the checksum holds
        with pytest.raises(CorruptionError, match="checksum"):
            seg.read_record(damaged, idx, FIRST, FIRST + i)


def test_idx_entry_past_the_end_of_data_is_never_decoded(monkeypatch):
    data, idx = build(SAMPLE)
    last = FIRST + len(SAMPLE) - 1
    offset, length, ts, flags = seg.idx_entry(idx, FIRST, last)
    calls = []
    real = seg.decode_frame
    monkeypatch.setattr(seg, "decode_frame", lambda *a: calls.append(a) or real(*a))
    for cut in (1, length - 1, length, length + 5):
        with pytest.raises(CorruptionError, match="past the end"):
            seg.read_record(data[:-cut], idx, FIRST, last)
    for bad in ((offset + 1, length), (offset, length + 1), (len(data), 38), (2**32 - 1, 38)):
        wrong = bytearray(idx)
        seg.IDX_ENTRY.pack_into(wrong, (last - FIRST) * 20, *bad, ts, flags)
        with pytest.raises(CorruptionError, match="past the end"):
            seg.read_record(data, wrong, FIRST, last)
    assert calls == []
    assert seg.read_record(data[:-length], idx, FIRST, last - 1) == expected(last - 1, *SAMPLE[-2])


def test_seq_mismatch_between_idx_and_frame():
    data, idx = build(SAMPLE)
    wrong = bytearray(idx)
    wrong[20:40] = idx[0:20]                      # the slot of FIRST+1 names FIRST's frame
    with pytest.raises(CorruptionError, match=f"holds seq {FIRST}"):
        seg.read_record(data, wrong, FIRST, FIRST + 1)
    with pytest.raises(CorruptionError):          # the segment read as if it began one later
        seg.read_record(data, idx, FIRST + 1, FIRST + 1)


def test_torn_last_idx_stride():
    data, idx = build(SAMPLE)
    last = FIRST + len(SAMPLE) - 1
    for cut in range(1, 20):
        torn = idx[:-cut]
        with pytest.raises(CorruptionError, match="no .idx entry"):
            seg.read_record(data, torn, FIRST, last)
        for seq in range(FIRST, last):
            assert seg.read_record(data, torn, FIRST, seq) == expected(seq, *SAMPLE[seq - FIRST])


def test_bad_frame_len():
    data, _ = build(SAMPLE[:1])
    for frame_len in (0, 1, 25, seg.DATA_FRAME_LEN_MIN - 1):
        damaged = bytearray(data)
        struct.pack_into("<I", damaged, 0, frame_len)
        with pytest.raises(CorruptionError, match="bad frame_len"):
            seg.decode_frame(damaged, 0)
    for frame_len in (len(data) - 3, len(data), 2**32 - 1):          # overruns the buffer
        damaged = bytearray(data)
        struct.pack_into("<I", damaged, 0, frame_len)
        with pytest.raises(CorruptionError, match="bad frame_len"):
            seg.decode_frame(damaged, 0)
    with pytest.raises(CorruptionError, match="bad frame_len"):          # overruns `end`
        seg.decode_frame(data + bytes(50), 0, len(data) - 1)
    for size in range(seg.DATA_HEADER_BYTES):
        with pytest.raises(CorruptionError, match="cut short"):
            seg.decode_frame(data[:size], 0)


def test_checksum_valid_frames_with_bad_sections():
    data, idx = build([(0, 1, b"nn", b"tt", b'{"d":1}')])
    for field_at, value in ((21, 3), (23, 1), (25, 8)):    # node_len, tag_len, data_len
        damaged = bytearray(data)
        struct.pack_into("<H" if field_at < 25 else "<I", damaged, field_at, value)
        reseal(damaged)
        with pytest.raises(CorruptionError, match="do not add up"):
            seg.read_record(damaged, idx, 1, 1)
    for at in (29, 31):                                    # node, tag
        damaged = bytearray(data)
        damaged[at] = 0xFF
        reseal(damaged)
        with pytest.raises(CorruptionError, match="UTF-8"):
            seg.read_record(damaged, idx, 1, 1)


def test_fuzz_mutated_data_raises_only_corruption_and_never_serves_other_bytes():
    records = SAMPLE * 3
    data, idx = build(records)
    spans = [seg.idx_entry(idx, FIRST, FIRST + i)[:2] for i in range(len(records))]
    originals = [expected(FIRST + i, *r) for i, r in enumerate(records)]
    rng = random.Random(0x5E6)
    served = failed = 0
    for _ in range(2000):
        buf = bytearray(data)
        if rng.random() < 0.15:
            cut = rng.randrange(len(data))
            del buf[cut:]
            touched = set(range(cut, len(data)))
        else:
            touched = {rng.randrange(len(data)) for _ in range(rng.randint(1, 4))}
            if rng.random() < 0.2:
                offset, length = rng.choice(spans)
                touched.add(offset + length - 1)                 # a del byte
            for at in touched:
                buf[at] = rng.randrange(256)
        view = bytes(buf)
        for i, (offset, length) in enumerate(spans):
            hit = any(offset <= at < offset + length for at in touched)
            try:
                got = seg.read_record(view, idx, FIRST, FIRST + i)
            except CorruptionError:
                assert hit, f"an untouched frame failed to read (seq {FIRST + i})"
                failed += 1
                continue
            served += 1
            assert got._replace(deleted=False) == originals[i]
            assert got.deleted == (view[offset + length - 1] == seg.DEL_DELETED)
        for offset in (rng.randrange(len(view) + 40) for _ in range(3)):
            try:                                             # decoding at any offset
                seg.decode_frame(view, offset)
            except CorruptionError:
                pass
    assert served and failed


# --- OpenSegment ------------------------------------------------------------------------------

@pytest.fixture
def topic_dir(tmp_path) -> str:
    path = tmp_path / "topics" / "0000000A"
    path.mkdir(parents=True)
    return str(path)


def test_open_creates_both_files(topic_dir):
    segment = OpenSegment(RealFs(), topic_dir, 1)
    segment.open()
    segment.close()
    assert sorted(os.listdir(topic_dir)) == ["seg-0000000000000001.data",
                                             "seg-0000000000000001.idx"]
    assert read_files(topic_dir, 1) == (b"", b"")
    assert seg.list_segment_files(RealFs(), topic_dir) == {1: {"data", "idx"}}


def test_add_and_flush(topic_dir):
    fs = FaultFs()
    segment = OpenSegment(fs, topic_dir, 1)
    try:
        add(segment, 1, 3)
        assert (segment.count, segment.data_len, segment.pending_count) == (0, 0, 3)
        assert segment.next_seq == 4 and segment.first_ts == 5001
        assert not os.path.exists(seg.data_path(topic_dir, 1))        # nothing written yet
        segment.flush()                                               # opens on first use
        assert (segment.count, segment.pending_count, segment.next_seq) == (3, 3, 4)
        assert segment.data_len == segment.pending_bytes == os.path.getsize(
            seg.data_path(topic_dir, 1))
        assert fs.count("sync_data") == 2
        assert_segment_holds(topic_dir, 1, range(1, 4))
        segment.flush()                                               # nothing pending
        assert fs.count("write_at") == 2 and fs.count("sync_data") == 2
        add(segment, 4, 2)
        assert segment.first_ts == 5001
        segment.flush()
        assert segment.count == 5
        assert_segment_holds(topic_dir, 1, range(1, 6))
    finally:
        segment.close()


def crashed_segment(fs, topic_dir: str) -> tuple[int, int]:
    """Seqs 1-3 durable, 4-6 flushed past what the snapshot vouches for; the durable sizes."""
    segment = OpenSegment(fs, topic_dir, 1)
    add(segment, 1, 3)
    segment.flush()
    durable = (segment.data_len, segment.count)
    add(segment, 4, 3)
    segment.flush()
    segment.close()
    return durable


def test_reopen_overwrites_a_crashed_flush_and_never_shrinks_the_files(topic_dir):
    durable = crashed_segment(RealFs(), topic_dir)
    for path in (seg.data_path(topic_dir, 1), seg.idx_path(topic_dir, 1)):
        with open(path, "ab") as handle:              # and a torn flush after it
            handle.write(b"\xab" * 57)
    sizes = [os.path.getsize(p) for p in (seg.data_path(topic_dir, 1),
                                          seg.idx_path(topic_dir, 1))]
    segment = OpenSegment(RealFs(), topic_dir, 1, *durable)
    segment.open()
    try:
        assert [os.path.getsize(p) for p in (seg.data_path(topic_dir, 1),
                                             seg.idx_path(topic_dir, 1))] == sizes
        assert segment.next_seq == 4
        add(segment, 4, 4)
        segment.flush()
        assert segment.count == 7
        assert_segment_holds(topic_dir, 1, range(1, 8), exact=False)
    finally:
        segment.close()


@pytest.mark.parametrize("op,at,kind", [
    ("write_at", 0, "eio"), ("write_at", 0, "enospc"), ("write_at", 1, "eio"),
    ("sync_data", 0, "eio"), ("sync_data", 1, "enospc"), ("open", 0, "eio"),
])
def test_failed_flush_changes_nothing_and_can_be_retried(topic_dir, op, at, kind):
    fs = FaultFs()
    segment = OpenSegment(fs, topic_dir, 1)
    try:
        add(segment, 1, 2)
        segment.flush()
        fs.fail(op, at=fs.count(op) + at, kind=kind)
        if op == "open":
            segment.close()                                   # the next flush reopens
            segment = OpenSegment(fs, topic_dir, 1, segment.data_len, segment.count)
        add(segment, 3, 3)
        before = (segment.data_len, segment.count, segment.pending_count, segment.next_seq)
        with pytest.raises(OSError):
            segment.flush()
        assert fs.fired and fs.fired[0][0] == op
        assert (segment.data_len, segment.count, segment.pending_count,
                segment.next_seq) == before
        assert before[:2] != (0, 0)
        segment.flush()                                       # the fault was once
        assert segment.count == 5
        assert_segment_holds(topic_dir, 1, range(1, 6))
    finally:
        segment.close()


def test_short_writes_are_completed(topic_dir):
    fs = FaultFs()
    fs.fail("write_at", at=0, kind="short")
    fs.fail("write_at", at=2, kind="short")
    segment = OpenSegment(fs, topic_dir, 1)
    try:
        add(segment, 1, 4)
        segment.flush()
        assert [f[2] for f in fs.fired] == ["short", "short"]
        assert_segment_holds(topic_dir, 1, range(1, 5))
    finally:
        segment.close()


def test_flush_retry_after_a_failed_idx_open(topic_dir):
    fs = FaultFs()
    segment = OpenSegment(fs, topic_dir, 1, *crashed_segment(fs, topic_dir))
    fs.fail("open", at=fs.count("open") + 1)                 # the .idx open
    add(segment, 4, 1)
    try:
        with pytest.raises(OSError):
            segment.flush()
        segment.flush()
        assert segment.count == 4
        assert_segment_holds(topic_dir, 1, range(1, 5), exact=False)
    finally:
        segment.close()


# --- SegmentReader ----------------------------------------------------------------------------

def write_segment(topic_dir: str, first: int, count: int, fs=None) -> OpenSegment:
    segment = OpenSegment(fs or RealFs(), topic_dir, first)
    add(segment, first, count)
    segment.flush()
    return segment


def test_reader_reads_what_open_segment_wrote_and_sees_later_flushes(topic_dir):
    segment = write_segment(topic_dir, 1, 3)
    reader = SegmentReader(RealFs())
    try:
        for seq in range(1, 4):
            assert reader.read(topic_dir, 1, seq) == expected(seq, *wal_record(seq))
        add(segment, 4, 3)
        segment.flush()                                  # the mapped segment grew
        for seq in (6, 4, 5, 1):
            assert reader.read(topic_dir, 1, seq) == expected(seq, *wal_record(seq))
        assert list(reader._views) == [(topic_dir, 1)]
        with pytest.raises(CorruptionError, match="no .idx entry"):
            reader.read(topic_dir, 1, 7)
    finally:
        reader.close()
        segment.close()
    assert reader._views == {}


def test_reader_remaps_when_data_was_mapped_before_a_flush(topic_dir):
    segment = write_segment(topic_dir, 1, 2)

    class FlushBetweenMaps(RealFs):
        armed, maps = True, 0

        def map_read(self, path):
            view = super().map_read(path)
            self.maps += 1
            if self.armed and path.endswith(".data"):   # .data mapped, then the flush lands
                self.armed = False
                add(segment, 3, 2)
                segment.flush()
            return view

    reader = SegmentReader(FlushBetweenMaps())
    try:
        assert reader.read(topic_dir, 1, 4) == expected(4, *wal_record(4))
        assert reader.read(topic_dir, 1, 1) == expected(1, *wal_record(1))
        assert reader.fs.maps == 4                      # the stale pair was mapped again once
    finally:
        reader.close()
        segment.close()


def test_reader_missing_segment(topic_dir):
    reader = SegmentReader(RealFs())
    with pytest.raises(CorruptionError, match="missing"):
        reader.read(topic_dir, 1, 1)
    with open(seg.data_path(topic_dir, 5), "wb") as handle:      # a stray single part
        handle.write(build(SAMPLE[:1], 5)[0])
    with pytest.raises(CorruptionError, match="missing"):
        reader.read(topic_dir, 5, 5)
    assert reader._views == {}


def test_reader_reports_corruption_with_the_segment_name(topic_dir):
    write_segment(topic_dir, 1, 3).close()
    data, idx = read_files(topic_dir, 1)
    offset = seg.idx_entry(idx, 1, 2)[0]
    with open(seg.data_path(topic_dir, 1), "r+b") as handle:
        handle.seek(offset + 10)
        handle.write(bytes([data[offset + 10] ^ 0x40]))
    reader = SegmentReader(RealFs())
    try:
        with pytest.raises(CorruptionError, match="seg-0000000000000001: .*checksum") as info:
            reader.read(topic_dir, 1, 2)
        assert info.value.detail == {"seq": 2}
        assert reader.read(topic_dir, 1, 3) == expected(3, *wal_record(3))
    finally:
        reader.close()


def test_reader_keeps_at_most_max_open_segments(topic_dir):
    firsts = [1, 11, 21, 31, 41]
    for first in firsts:
        write_segment(topic_dir, first, 3).close()
    reader = SegmentReader(RealFs(), max_open=2)
    try:
        mapped = {}
        for first in firsts + firsts[::-1] + [1, 41, 1, 21]:
            assert reader.read(topic_dir, first, first + 2) == expected(first + 2,
                                                                        *wal_record(first + 2))
            mapped.setdefault(first, []).append(reader._views[(topic_dir, first)])
            assert len(reader._views) <= 2
        assert list(reader._views) == [(topic_dir, 1), (topic_dir, 21)]
        live = {id(v) for pair in reader._views.values() for v in pair}
        for pairs in mapped.values():                             # evicted maps are closed
            for pair in pairs:
                assert all(v.closed == (id(v) not in live) for v in pair)
        reader.keep_only(set())
        assert reader._views == {}
    finally:
        reader.close()


def test_list_segment_files(topic_dir):
    for name in ("seg-0000000000000001.data", "seg-0000000000000001.idx",
                 "seg-0000000000000005.data", "seg-0000000000000009.idx",
                 "seg-0000000000000012.data.tmp", "seg-0000000000000012.idx.tmp",
                 "seg-0000000000000001.data.tmp", "seg-1.data", "notes.txt"):
        open(os.path.join(topic_dir, name), "wb").close()
    assert seg.list_segment_files(RealFs(), topic_dir) == {1: {"data", "idx"}, 5: {"data"},
                                                           9: {"idx"}}
    assert seg.data_path(topic_dir, 5) == os.path.join(topic_dir, "seg-0000000000000005.data")
    assert seg.idx_path(topic_dir, 9) == os.path.join(topic_dir, "seg-0000000000000009.idx")


def test_list_segment_files_ignores_names_with_a_trailing_newline(topic_dir):
    open(os.path.join(topic_dir, "seg-0000000000000003.data\n"), "wb").close()
    assert seg.list_segment_files(RealFs(), topic_dir) == {}
