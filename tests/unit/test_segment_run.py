"""The bulk decode of sealed segment runs (storage/segment_run.py) and the shard's `scan`
fast path built on it: the same records, in the same columns, as the per-record read.

Goal: a run decoded in bulk holds exactly what segment.read_record + record_envelope.data yields
record by record (tags, nodes, meta envelopes, deleted records skipped), a damaged record
is still a CorruptionError (never served, never skipped), and the shard's `scan` over
sealed segments answers exactly as its record-by-record path does.

Method: segments built in memory with encode_record, damaged by flipping bytes; for the
shard, a ShardHarness (tests/unit/conftest.py) sealed by a checkpoint, scanned with and
without its SegmentReader.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from topics_actors.errors import CorruptionError
from topics_actors.protocol.messages import DeleteRecords, Scan
from topics_actors.shard.range_scan import scan
from topics_actors.spark.segment_files import SegmentPiece, group_pieces, read_piece
from topics_actors.storage import segment as seg
from topics_actors.record_envelope import build as append_envelope
from topics_actors.record_envelope import data as envelope_data
from topics_actors.record_envelope import has_meta
from topics_actors.storage.frame_types import FLAG_META
from topics_actors.storage.segment_run import Columns, decode_run
from tools.testing.shard_harness import rec

FIRST = 7


def build(count: int = 30) -> tuple[bytearray, bytes]:
    """A segment of `count` records from seq FIRST: tags, nodes, meta and UTF-8 mixed."""
    data, idx = bytearray(), bytearray()
    for i in range(count):
        meta = b'{"k":%d}' % i if i % 4 == 1 else None
        envelope = append_envelope(b'{"i":%d,"s":"\xc3\xa9"}' % i, meta)
        seg.encode_record(data, idx, 0, FLAG_META if meta else 0, FIRST + i, 1000 + i,
                          b"n%d" % i if i % 3 == 0 else b"", "t\u00e9%d".encode() % i
                          if i % 2 else b"", envelope)
    return data, bytes(idx)


def per_record(data, idx, skip=(), ts_min=-1) -> list:
    out = []
    for seq in range(FIRST, FIRST + len(idx) // 20):
        r = seg.read_record(bytes(data), idx, FIRST, seq)
        if seq not in skip and not r.deleted and r.ts >= ts_min:
            out.append((seq, r.ts, envelope_data(r.envelope, has_meta(r.flags)), r.tag, r.node))
    return out


def bulk(data, idx, lo: int = FIRST, **kw) -> list:
    offsets, lengths = seg.index_words(idx[(lo - FIRST) * 20:])
    start, end = seg.span(offsets, lengths)
    cols = Columns()
    last = decode_run(memoryview(bytes(data))[start:end], start, offsets, lengths, lo, cols,
                      "test", **kw)
    ends = cols.offsets.tolist()
    texts = [bytes(cols.data[a:b]) for a, b in zip(ends, ends[1:])]
    assert last >= (cols.seqs[-1] if cols.seqs else lo - 1)
    return list(zip(cols.seqs, cols.stamps, texts, cols.tags, cols.nodes))


def delete(data: bytearray, idx: bytes, seq: int) -> None:
    offset, length, _, _ = seg.idx_entry(idx, FIRST, seq)
    data[offset + length - 1] = seg.DEL_DELETED


def test_a_run_decodes_as_the_per_record_read():
    data, idx = build()
    assert bulk(data, idx) == per_record(data, idx)
    assert bulk(data, idx, FIRST + 5) == per_record(data, idx)[5:]
    metas = [r for r in bulk(data, idx) if (r[0] - FIRST) % 4 == 1]
    assert metas and all(r[2].startswith(b'{"i":') for r in metas)   # cut out of {"d":..,"m":..}


def test_deleted_skipped_and_expired_records_are_passed_over():
    data, idx = build()
    for seq in (FIRST, FIRST + 4, FIRST + 29):
        delete(data, idx, seq)
    skip = {FIRST + 10, FIRST + 11}
    want = per_record(data, idx, skip, ts_min=1003)
    assert bulk(data, idx, skip=skip, ts_min=1003) == want
    assert bulk(data, idx, skip=skip, ts_min=1003, check_deleted=True) == want
    assert [r[0] for r in want][:3] == [FIRST + 3, FIRST + 5, FIRST + 6]


@pytest.mark.parametrize("where", ["data", "checksum", "header"])
def test_a_damaged_record_is_an_error_never_served(where):
    data, idx = build()
    offset, length, _, _ = seg.idx_entry(idx, FIRST, FIRST + 12)
    at = {"data": offset + length - 12, "checksum": offset + length - 3,
          "header": offset + 14}[where]
    data[at] ^= 0x20
    with pytest.raises(CorruptionError):
        bulk(data, idx)
    with pytest.raises(CorruptionError):
        seg.read_record(bytes(data), idx, FIRST, FIRST + 12)
    if where != "header":                       # verify=False is the caller's explicit choice
        assert len(bulk(data, idx, verify=False)) == 30


def test_a_damaged_deleted_record_is_an_error_only_where_checked():
    data, idx = build()
    offset, length, _, _ = seg.idx_entry(idx, FIRST, FIRST + 3)
    data[offset + 40] ^= 1
    delete(data, idx, FIRST + 3)
    assert [r[0] for r in bulk(data, idx)][3:5] == [FIRST + 4, FIRST + 5]   # segment files
    with pytest.raises(CorruptionError):                    # the shard checks it first
        bulk(data, idx, check_deleted=True)


def test_an_idx_entry_that_does_not_match_its_frame_is_an_error():
    data, idx = build()
    wrong = bytearray(idx)
    seg.IDX_ENTRY.pack_into(wrong, 5 * 20, *seg.idx_entry(idx, FIRST, FIRST + 6))
    with pytest.raises(CorruptionError, match="seq 12"):
        bulk(data, bytes(wrong))
    short = bytearray(idx)
    offset, length, ts, flags = seg.idx_entry(idx, FIRST, FIRST + 2)
    seg.IDX_ENTRY.pack_into(short, 2 * 20, offset, 20, ts, flags)
    with pytest.raises(CorruptionError):
        bulk(data, bytes(short))


def test_a_tag_that_is_not_utf8_is_an_error():
    data, idx = bytearray(), bytearray()
    seg.encode_record(data, idx, 0, 0, FIRST, 1, b"", b"ok", b'{"d":1}')
    seg.encode_record(data, idx, 0, 0, FIRST + 1, 1, b"", b"\xff", b'{"d":2}')
    with pytest.raises(CorruptionError, match="UTF-8"):
        bulk(data, bytes(idx))


def test_segment_file_pieces_read_in_chunks_as_in_one(tmp_path):
    data, idx = build()
    delete(data, idx, FIRST + 8)
    directory = tmp_path / "t"
    directory.mkdir()
    pathlib.Path(seg.data_path(str(directory), FIRST)).write_bytes(bytes(data))
    pathlib.Path(seg.idx_path(str(directory), FIRST)).write_bytes(idx)
    piece = SegmentPiece("t", "t", FIRST, 30, len(data), FIRST + 1, FIRST + 27, FIRST + 2)

    def rows(chunk_seqs: int) -> list:
        out = []
        for seqs, stamps, texts, ends, tags, nodes in read_piece(piece, str(tmp_path),
                                                                 chunk_seqs=chunk_seqs):
            ends = ends.tolist()
            out += zip(seqs, stamps, [texts[a:b] for a, b in zip(ends, ends[1:])], tags,
                       nodes)
        return out
    want = [r for r in per_record(data, idx) if FIRST + 2 < r[0] <= FIRST + 27]
    assert rows(1000) == rows(7) == rows(1) == want and len(want) == 24


def test_consecutive_pieces_of_a_topic_join_up_to_a_partition():
    def piece(topic, after, until):
        return SegmentPiece(topic, topic, after + 1, until - after, 0, after, until, 0)
    pieces = [piece("a", 0, 10), piece("a", 10, 20), piece("a", 20, 25), piece("a", 25, 40),
              piece("b", 40, 45), piece("b", 50, 55), piece("b", 55, 60)]
    groups = group_pieces(pieces, 25)
    assert [[(p.topic, p.after_seq, p.until_seq) for p in g] for g in groups] == [
        [("a", 0, 10), ("a", 10, 20), ("a", 20, 25)], [("a", 25, 40)], [("b", 40, 45)],
        [("b", 50, 55), ("b", 55, 60)]]
    assert group_pieces(pieces, 1) == [(p,) for p in pieces]


def test_the_budget_cuts_a_run_before_the_record_that_would_exceed_it():
    data, idx = build()
    everything = per_record(data, idx)
    budget = sum(len(r[2]) for r in everything[:4]) + 3
    assert bulk(data, idx, budget=budget) == everything[:4]
    assert bulk(data, idx, budget=1) == everything[:1]         # one record always goes


# --- the shard's scan over sealed segments ----------------------------------------------------

def fill(h, env) -> None:
    h.put("s", durable=True)
    for i in range(1, 41):
        h.append("s", rec(b'{"i":%d}' % i, f"g{i % 3}" if i % 2 else None,
                          "nd" if i % 5 == 0 else None, b'{"m":%d}' % i if i % 4 == 0 else None))
    h.call(DeleteRecords("s", match="g1"))          # before the checkpoint: del bytes set
    env.checkpoint([h], env.checkpointer(max_events=6))
    h.call(DeleteRecords("s", match="g2"))          # after it: the shard's deleted set
    for i in range(41, 46):                         # a WAL tail past the sealed part
        h.append("s", rec(b'{"i":%d}' % i))


@pytest.mark.parametrize("after, until, limit, budget",
                         [(0, 0, 0, 0), (3, 0, 0, 0), (0, 30, 4, 0), (5, 44, 7, 0),
                          (0, 0, 0, 40), (11, 0, 3, 25), (38, 0, 0, 0)])
def test_shard_scan_over_segments_answers_as_the_per_record_path(env, after, until, limit,
                                                                 budget):
    h = env.single()
    fill(h, env)
    topic = h.core.registry.topics["s"]
    assert topic.absorbed == 40 and len(topic.seg_firsts) == 7 and topic.deleted
    req = Scan("s", after, until, limit, budget)
    fast = scan(topic, h.core.reader.read, req, 10**13, h.core.reader.segments)
    slow = scan(topic, h.core.reader.read, req, 10**13)
    assert fast == slow and fast["count"] > 0
    h.crash()


def test_shard_scan_of_a_damaged_sealed_record_is_an_error(env):
    h = env.single()
    fill(h, env)
    topic = h.core.registry.topics["s"]
    first = topic.seg_firsts[2]
    index = pathlib.Path(seg.idx_path(topic.seg_dir, first)).read_bytes()
    offset, length, _, _ = seg.idx_entry(index, first, first + 1)
    path = seg.data_path(topic.seg_dir, first)
    with open(path, "r+b") as handle:
        handle.seek(offset + length - 11)
        byte = handle.read(1)
        handle.seek(offset + length - 11)
        handle.write(bytes((byte[0] ^ 0x40,)))
        os.fsync(handle.fileno())
    h.core.reader.segments.forget(topic.seg_dir, first)
    for segments in (h.core.reader.segments, None):
        with pytest.raises(CorruptionError):
            scan(topic, h.core.reader.read, Scan("s", 0, 0, 0, 0), 10**13, segments)
    h.crash()
