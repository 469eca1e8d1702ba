"""Batch frames in segments (storage/segment_batch.py): the records of an AppendBatch
absorbed as one frame, read, deleted, bulk-decoded, audited, repaired and cut like record
frames.

Goal: a segment mixing record frames and batch frames reads back every record as it was
appended (per record, through the reader's cache of the last checked frame, and in bulk
with skips, deletions, TTL and a byte budget), each record's del byte is its own (a flip
deletes that record alone), a damaged batch frame is a fault of every record in it that
the repair turns into deleted records of the same place, a wrong .idx entry is rewritten
from the frame, a rewritten frame is checked again rather than read from the cache, and a
cut through a batch frame keeps the records before the cut.

Method: segments written by OpenSegment (add_texts and encode_record frames side by side)
in a temp dir, read with SegmentReader, read_record and segment_run.decode_run, broken by
hand.
"""

from __future__ import annotations

import os
import pathlib
from array import array
from itertools import accumulate

import pytest

from topics_actors.errors import CorruptionError
from topics_actors.storage import batch_frame, segment_batch
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import (
    FLAG_BATCH, IDX_ENTRY, OpenSegment, SegmentReader, cut_before, data_path,
    encode_record, flip_deleted, idx_path, index_flags, index_words, read_record,
)
from topics_actors.storage.segment_audit import audit, repair
from topics_actors.storage.segment_run import Columns, decode_run

FIRST = 10


def texts(first: int, count: int) -> list[bytes]:
    return [b'{"n":%d}' % (first + i) for i in range(count)]


def add_batch(segment: OpenSegment, first: int, count: int, ts: int = 500,
              node: bytes = b"") -> None:
    datas = texts(first, count)
    segment.add_texts(first, ts, 0, node, batch_frame.head(array("I", accumulate(
        map(len, datas)))), b"".join(datas), count)


def add_record(segment: OpenSegment, seq: int, ts: int = 400) -> None:
    encode_record(segment.data_buf, segment.idx_buf, segment.data_len, 0, seq, ts, b"",
                  b"tg", b'{"d":{"n":%d}}' % seq)
    segment.next_seq = seq + 1


@pytest.fixture
def topic_dir(tmp_path) -> str:
    """Seqs 10..12 batch (node n), 13 record (tag), 14..20 batch, 21 record, 22..23 batch."""
    segment = OpenSegment(RealFs(), str(tmp_path), FIRST)
    add_batch(segment, 10, 3, node=b"n")
    add_record(segment, 13)
    add_batch(segment, 14, 7, ts=600)
    add_record(segment, 21)
    add_batch(segment, 22, 2, ts=700)
    segment.flush()
    return str(tmp_path)


COUNT = 14


def expected(seq: int) -> tuple:
    """(seq, ts, envelope, tag, node) of each record of the fixture."""
    if seq in (13, 21):
        return seq, 400, b'{"d":{"n":%d}}' % seq, "tg", None
    ts = 500 if seq < 13 else 600 if seq < 21 else 700
    return seq, ts, b'{"d":{"n":%d}}' % seq, None, "n" if seq < 13 else None


def files(topic_dir: str) -> tuple[bytearray, bytearray]:
    return tuple(bytearray(pathlib.Path(p).read_bytes())
                 for p in (data_path(topic_dir, FIRST), idx_path(topic_dir, FIRST)))


def test_every_record_reads_back_and_a_batch_frame_is_checked_once(topic_dir, monkeypatch):
    decoded = []
    real = segment_batch.decode
    monkeypatch.setattr(segment_batch, "decode",
                        lambda view, at, limit, verify=True: decoded.append(at)
                        or real(view, at, limit, verify))
    reader = SegmentReader(RealFs())
    try:
        got = [reader.read(topic_dir, FIRST, seq) for seq in range(FIRST, FIRST + COUNT)]
    finally:
        reader.close()
    assert [(r.seq, r.ts, r.envelope, r.tag, r.node) for r in got] == list(
        map(expected, range(FIRST, FIRST + COUNT)))
    assert not any(r.deleted for r in got) and all(r.flags & FLAG_BATCH == 0 for r in got)
    assert len(decoded) == 3 == len(set(decoded))        # three batch frames, once each
    data, idx = files(topic_dir)
    assert audit(data, idx, FIRST, COUNT, len(data)) == []


def test_a_flip_deletes_that_record_alone(topic_dir):
    flip_deleted(RealFs(), topic_dir, FIRST, 16)
    data, idx = files(topic_dir)
    deleted = [seq for seq in range(FIRST, FIRST + COUNT)
               if read_record(data, idx, FIRST, seq).deleted]
    assert deleted == [16]
    assert audit(data, idx, FIRST, COUNT, len(data)) == []


def test_a_rewritten_frame_is_checked_again_not_read_from_the_cache(topic_dir):
    reader = SegmentReader(RealFs())
    try:
        assert reader.read(topic_dir, FIRST, 15).envelope == b'{"d":{"n":15}}'
        data, idx = files(topic_dir)
        offset = IDX_ENTRY.unpack_from(idx, 5 * 20)[0]
        segment = OpenSegment(RealFs(), topic_dir, FIRST, offset, 4)   # a cut before 14
        datas = [b'"again%d"' % i for i in range(7)]
        segment.add_texts(14, 600, 0, b"", batch_frame.head(array("I", accumulate(
            map(len, datas)))), b"".join(datas), 7)
        segment.flush()
        assert reader.read(topic_dir, FIRST, 15).envelope == b'{"d":"again1"}'
    finally:
        reader.close()


def bulk(topic_dir: str, lo: int, hi: int, **kw) -> Columns:
    data, idx = files(topic_dir)
    index = bytes(idx[(lo - FIRST) * 20:(hi - FIRST + 1) * 20])
    offsets, lengths = index_words(index)
    cols = Columns()
    decode_run(memoryview(bytes(data)), 0, offsets, lengths, lo, cols, "here",
               flags=index_flags(index), **kw)
    return cols


def datas_of(cols: Columns) -> list[bytes]:
    ends = cols.offsets
    return [bytes(cols.data[a:b]) for a, b in zip(ends, ends[1:])]


@pytest.mark.parametrize("lo,hi", [(10, 23), (11, 23), (15, 17), (13, 14), (20, 22)])
def test_bulk_decode_takes_batch_frames_whole_or_in_part(topic_dir, lo, hi):
    cols = bulk(topic_dir, lo, hi)
    assert list(cols.seqs) == list(range(lo, hi + 1))
    assert datas_of(cols) == [expected(s)[2][5:-1] for s in range(lo, hi + 1)]
    assert list(cols.stamps) == [expected(s)[1] for s in range(lo, hi + 1)]
    assert cols.tags == [expected(s)[3] for s in range(lo, hi + 1)]
    assert cols.nodes == [expected(s)[4] for s in range(lo, hi + 1)]


def test_bulk_decode_skips_deleted_skipped_and_expired_records_and_keeps_the_budget(
        topic_dir):
    flip_deleted(RealFs(), topic_dir, FIRST, 15)
    cols = bulk(topic_dir, 10, 23, skip={17, 11}, check_deleted=True)
    assert list(cols.seqs) == [10, 12, 13, 14, 16, 18, 19, 20, 21, 22, 23]
    cols = bulk(topic_dir, 10, 23, ts_min=650)
    assert list(cols.seqs) == [22, 23]
    cols = bulk(topic_dir, 10, 23, budget=3 * len(b'{"n":10}') + 2)
    assert list(cols.seqs) == [10, 11, 12]


def test_a_damaged_batch_frame_is_a_fault_of_each_record_and_repairs_to_deleted_ones(
        topic_dir):
    data, idx = files(topic_dir)
    offset = IDX_ENTRY.unpack_from(idx, 5 * 20)[0]        # the frame of 14..20
    dels_at = offset + IDX_ENTRY.unpack_from(idx, 10 * 20)[1] - 7
    data[dels_at - 8 - 2] ^= 0xFF                         # a byte of seq 20's text
    pathlib.Path(data_path(topic_dir, FIRST)).write_bytes(data)
    faults = audit(data, idx, FIRST, COUNT, len(data))
    assert [f.seq for f in faults] == list(range(14, 21))
    assert {(f.fix, f.offset) for f in faults} == {("placeholder", offset)}
    with pytest.raises(CorruptionError, match="checksum"):
        read_record(data, idx, FIRST, 15)
    repair(RealFs(), data_path(topic_dir, FIRST), idx_path(topic_dir, FIRST), FIRST, faults)
    data, idx = files(topic_dir)
    assert audit(data, idx, FIRST, COUNT, len(data)) == []
    assert [read_record(data, idx, FIRST, s).deleted for s in range(FIRST, FIRST + COUNT)] \
        == [FIRST + i in range(14, 21) for i in range(COUNT)]
    assert read_record(data, idx, FIRST, 21).envelope == expected(21)[2]


def test_a_wrong_entry_of_a_batch_record_is_rewritten_from_the_frame(topic_dir):
    data, idx = files(topic_dir)
    good = bytes(idx)
    offset, length, ts, flags = IDX_ENTRY.unpack_from(idx, 6 * 20)    # seq 16
    IDX_ENTRY.pack_into(idx, 6 * 20, offset, length + 1, ts, flags)
    pathlib.Path(idx_path(topic_dir, FIRST)).write_bytes(idx)
    [fault] = audit(data, idx, FIRST, COUNT, len(data))
    assert (fault.seq, fault.fix) == (16, "idx")
    repair(RealFs(), data_path(topic_dir, FIRST), idx_path(topic_dir, FIRST), FIRST, [fault])
    assert files(topic_dir)[1] == good


@pytest.mark.parametrize("seq", [14, 15, 17, 20, 21])
def test_a_cut_through_a_batch_frame_keeps_the_records_before_it(topic_dir, seq):
    cut = cut_before(RealFs(), topic_dir, FIRST, seq)
    segment = OpenSegment(RealFs(), topic_dir, FIRST, cut.data_len, cut.count)
    if cut.kept:
        segment.add_texts(*cut.kept)
    assert segment.next_seq == seq
    add_batch(segment, seq, 2, ts=900)
    segment.flush()
    data, idx = files(topic_dir)
    count = seq + 2 - FIRST
    assert audit(data, idx, FIRST, count, segment.data_len) == []
    got = [read_record(data, idx, FIRST, s)[:6] for s in range(FIRST, FIRST + count)]
    flags = {s: 2 if s < 13 else 1 if s in (13, 21) else 0 for s in range(FIRST, seq)}
    assert got[:seq - FIRST] == [(s, expected(s)[1], flags[s], expected(s)[4],
                                  expected(s)[3], expected(s)[2]) for s in range(FIRST, seq)]
    assert [r[5] for r in got[seq - FIRST:]] == [b'{"d":{"n":%d}}' % s
                                                 for s in (seq, seq + 1)]
    assert os.path.getsize(data_path(topic_dir, FIRST)) >= segment.data_len
