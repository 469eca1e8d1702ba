"""AppendBatch frames (storage/batch_frame.py): one WAL frame for a batch of plain records
means exactly what one Append frame per record would.

Goal: a shard's recovery, the compactor and fsck read an AppendBatch as the Append frames of
its records: the same topic states, the same records in the segments (there as batch
frames, split where a segment fills, within the segment limits whatever they are), a batch
that overlaps the head taken from the head on, one after a gap refused as that gap's
Append would be; and a batch whose body breaks a rule (count, table, flags, a tag) ends
the log there like any invalid frame.

Method: WAL bytes built twice with the frame encoders, once as Append frames and once as
AppendBatch frames of the same records, scanned by a TopicLedger or SegmentLedger and
compared (segments read back record by record as a shard reads them, and audited as
recovery audits them); bodies broken by hand with their checksum made to match again.
"""

from __future__ import annotations

import os
import pathlib
import struct
from array import array
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors.compactor import segment_ledger
from topics_actors.compactor.segment_ledger import SegmentLedger, SegmentLimits
from topics_actors.ledger.recovery_audit import RecoveryAudit
from topics_actors.ledger.topic_ledger import TopicLedger
from topics_actors.storage import frame_body
from topics_actors.storage.frame import (
    CHECKSUM, HEADER, decode_at, encode_appends, encode_batch, encode_frame,
)
from topics_actors.storage.frame_types import FLAG_DURABLE, FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import SegmentReader, data_path, idx_path
from topics_actors.storage.segment_audit import audit
from topics_actors.topic_identity import topic_id
import xxhash

NAMES = ("a", "b")
TIDS = {name: topic_id(name) for name in NAMES}


def create(name: str) -> bytes:
    return encode_frame(FrameType.TOPIC_CREATE, TIDS[name],
                        data=frame_body.encode_topic(name, b'{"durability":"disk"}'))


def texts_of(first: int, count: int, width: int = 0) -> list[bytes]:
    return [b'{"n":%d,"x":"%s"}' % (first + i, b"y" * ((first + i) * width % 23))
            for i in range(count)]


def as_batch(name: str, first: int, texts: list[bytes], ts: int = 1000, flags: int = 0,
             node: bytes = b"") -> bytes:
    buf = bytearray()
    encode_batch(buf, TIDS[name], first, ts, flags, node, b"".join(texts),
                 array("I", accumulate(map(len, texts))))
    return bytes(buf)


def as_appends(name: str, first: int, texts: list[bytes], ts: int = 1000, flags: int = 0,
               node: bytes = b"") -> bytes:
    buf = bytearray()
    encode_appends(buf, TIDS[name], first, ts, flags,
                   [(b'{"d":' + t + b"}", b"", node, 0, len(t)) for t in texts])
    return bytes(buf)


def state(ledger: TopicLedger) -> dict:
    return {t.name: (t.head, t.count, t.bytes, t.last_write_ts, t.next_seq)
            for t in ledger.by_tid.values()}


def scan(ledger: TopicLedger, wal: bytes) -> tuple[int, bool]:
    return ledger.scan(wal, 0, len(wal), 10_000)


def test_a_batch_frame_decodes_and_is_a_small_fraction_of_its_appends():
    texts = texts_of(1, 64)
    batch, appends = as_batch("a", 1, texts), as_appends("a", 1, texts)
    frame = decode_at(batch, 0, len(batch))
    assert (frame.type, frame.seq, frame.size) == (FrameType.APPEND_BATCH, 1, len(batch))
    assert len(batch) == len(appends) - 64 * (46 + 6) + 46 + 4 + 4 * 64


def test_recovery_reads_a_batch_as_its_appends():
    wal_parts = [(create, ("a",)), (create, ("b",))]
    records = [("a", 1, texts_of(1, 10)), ("b", 1, texts_of(1, 3)),
               ("a", 11, texts_of(11, 1)), ("a", 12, texts_of(12, 40, 3))]
    batch_wal = b"".join(f(*a) for f, a in wal_parts) + b"".join(
        as_batch(n, first, t, ts=first) for n, first, t in records)
    append_wal = b"".join(f(*a) for f, a in wal_parts) + b"".join(
        as_appends(n, first, t, ts=first) for n, first, t in records)
    batched, appended = TopicLedger(0), TopicLedger(0)
    assert scan(batched, batch_wal) == (len(batch_wal), True)
    scan(appended, append_wal)
    assert state(batched) == state(appended)
    a_bytes = sum(len(t) for name, _, texts in records if name == "a" for t in texts)
    assert state(batched)["a"][:3] == (51, 51, a_bytes)
    assert batched.applied == len(wal_parts) + 54 == appended.applied


def test_a_batch_overlapping_the_head_is_taken_from_the_head_on():
    """After a shard count change or a follower's cut, a batch may hold seqs the topic has:
    those are known, the rest are taken, as Append frames of the same seqs would be."""
    wal = create("a") + as_batch("a", 1, texts_of(1, 10))
    overlap = as_batch("a", 5, texts_of(5, 10), ts=2000)
    known = as_batch("a", 3, texts_of(3, 4), ts=3000)
    batched, appended = TopicLedger(0), TopicLedger(0)
    scan(batched, wal + overlap + known)
    scan(appended, create("a") + as_appends("a", 1, texts_of(1, 10))
         + as_appends("a", 5, texts_of(5, 10), ts=2000)
         + as_appends("a", 3, texts_of(3, 4), ts=3000))
    assert state(batched) == state(appended)
    assert state(batched)["a"][0] == 14 and state(batched)["a"][3] == 2000


def test_a_batch_after_a_gap_is_refused_like_its_first_append(tmp_path):
    wal = create("a") + as_batch("a", 1, texts_of(1, 5)) + as_batch("a", 7, texts_of(7, 5))
    ledger = TopicLedger(0)
    scan(ledger, wal)
    assert state(ledger)["a"][0] == 5 and ledger.ignored["append_out_of_order"] == 1
    audited = TopicLedger(0)
    audit = RecoveryAudit(str(tmp_path))
    audited.audit, audited.frozen = audit, audit.frozen
    audit.path = str(tmp_path / "wal-1")
    scan(audited, wal)
    found = audit.quarantined[TIDS["a"]]
    assert found.lost_records == 5 and "not contiguous" in found.reason


def _rechecked(frame: bytearray) -> bytes:
    """The frame with its checksum made to match its bytes again."""
    CHECKSUM.pack_into(frame, len(frame) - 8, xxhash.xxh3_64_intdigest(bytes(frame[4:-8])))
    return bytes(frame)


def _broken(how: str) -> bytes:
    frame = bytearray(as_batch("a", 1, texts_of(1, 4)))
    body = HEADER.size
    if how == "count zero":
        struct.pack_into("<I", frame, body, 0)
    elif how == "count too large":
        struct.pack_into("<I", frame, body, 10_000)
    elif how == "ends not increasing":
        first, second = struct.unpack_from("<II", frame, body + 4)
        struct.pack_into("<II", frame, body + 4, second, first)
    elif how == "last end short":
        last = body + 4 + 4 * 3
        struct.pack_into("<I", frame, last, struct.unpack_from("<I", frame, last)[0] - 1)
    elif how == "a tag flag":
        frame[5] |= 1
    elif how == "a meta flag":
        frame[5] |= 8
    return _rechecked(frame)


@pytest.mark.parametrize("how", ["count zero", "count too large", "ends not increasing",
                                 "last end short", "a tag flag", "a meta flag"])
def test_a_batch_whose_body_breaks_a_rule_ends_the_log(how):
    good = create("a") + as_batch("a", 1, texts_of(1, 3))
    wal = good + _broken(how) + as_batch("a", 4, texts_of(4, 2))
    ledger = TopicLedger(0)
    assert scan(ledger, wal) == (len(good), True)
    assert state(ledger)["a"][0] == 3
    assert decode_at(wal, len(good), len(wal)) is None


def test_a_batch_with_a_tag_section_ends_the_log():
    frame = bytearray(as_batch("a", 1, texts_of(1, 3)))
    fields = list(HEADER.unpack_from(frame, 0))
    fields[7], fields[8] = 2, fields[8] - 2     # two body bytes called a tag
    HEADER.pack_into(frame, 0, *fields)
    wal = create("a") + _rechecked(frame)
    ledger = TopicLedger(0)
    assert scan(ledger, wal) == (len(create("a")), True)


def segment_records(ledger: SegmentLedger) -> tuple[dict, list]:
    """Every record the ledger's segments hold, per topic in seq order, as a shard reads
    them, and each segment as [name, dir, first, count, data_len] (call after
    flush_all)."""
    reader, records, segments = SegmentReader(RealFs()), {}, []
    try:
        for entry in ledger.entries(0):
            directory = os.path.join(ledger.data_dir, entry["dir"]) if entry["dir"] else ""
            for first, count, data_len in entry["segments"]:
                segments.append([entry["name"], directory, first, count, data_len])
                records.setdefault(entry["name"], []).extend(
                    tuple(reader.read(directory, first, seq))
                    for seq in range(first, first + count))
    finally:
        reader.close()
    return records, segments


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 40),
                                  st.sampled_from([0, FLAG_DURABLE]),
                                  st.sampled_from([b"", b"n1"]), st.integers(0, 90)),
                        min_size=1, max_size=10),
       max_events=st.integers(1, 50), max_bytes=st.integers(60, 3000),
       max_age_ms=st.sampled_from([0, 5, 50]), buffer_bytes=st.integers(40, 2000))
def test_the_compactor_keeps_the_records_of_a_batch_within_the_segment_limits(
        tmp_path_factory, batches, max_events, max_bytes, max_age_ms, buffer_bytes):
    """Whatever the limits (records, bytes, age, the buffer's flush), a checkpoint of
    AppendBatch frames (written as batch frames, split where a segment fills) holds the
    records a checkpoint of their Append frames holds, every segment within its limits
    and passing the recovery audit."""
    heads, ts = dict.fromkeys(NAMES, 0), 1000
    wals = [b"".join(map(create, NAMES))] * 2
    for name, count, flags, node, ts_step in batches:
        first = heads[name] + 1
        ts += ts_step
        texts = texts_of(first, count, 5)
        wals = [wals[0] + as_batch(name, first, texts, ts, flags, node),
                wals[1] + as_appends(name, first, texts, ts, flags, node)]
        heads[name] = first + count - 1
    limits = SegmentLimits(max_events, max_bytes, max_age_ms)
    results = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(segment_ledger, "BUFFER_BYTES_MAX", buffer_bytes)
        for wal in wals:
            ledger = SegmentLedger(RealFs(), str(tmp_path_factory.mktemp("seg")), limits, 0)
            assert scan(ledger, wal) == (len(wal), True)
            ledger.flush_all()
            results.append((state(ledger), *segment_records(ledger)))
            ledger.close()
    (batched, records, segments), (appended, expected, _) = results
    assert batched == appended and records == expected
    longest = max(len(t) for t in texts_of(1, max(heads.values()), 5)) + 64
    for name, directory, first, count, data_len in segments:
        assert count <= max_events
        data = pathlib.Path(data_path(directory, first)).read_bytes()
        idx = pathlib.Path(idx_path(directory, first)).read_bytes()
        assert audit(data, idx, first, count, data_len) == []
        assert data_len < max_bytes + longest
