"""Runs of plain Appends (ledger/append_run.py): a reader of the WAL takes a batch's frames
in one step, and ends up exactly where the frame-by-frame reading does.

Goal: with runs, a shard's recovery and the compactor's checkpoint hold the same topic
states, the same segment files (sealed and flushed at the same records) and stop at the
same damaged frame as when every frame is taken alone; a run never swallows a frame of
another topic, a gap, another flags byte, a node or tag, or a bad checksum.

Method: WAL bytes built with the frame encoder, scanned by a TopicLedger or SegmentLedger
twice, once with runs turned off (append_run.RUN_FRAMES_MAX = 0), and compared.
"""

from __future__ import annotations

import os
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors.compactor import segment_ledger
from topics_actors.compactor.segment_ledger import SegmentLedger, SegmentLimits
from topics_actors.ledger import append_run
from topics_actors.ledger.topic_ledger import TopicLedger
from topics_actors.storage import frame_body
from topics_actors.storage.frame import HEADER, encode_frame
from topics_actors.storage.frame_types import FLAG_DURABLE, FLAG_META, FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.topic_identity import topic_id

NAMES = ("a", "b", "c")
TIDS = {name: topic_id(name) for name in NAMES}


def create(name: str) -> bytes:
    config = b'{"durability":"disk"}'
    return encode_frame(FrameType.TOPIC_CREATE, TIDS[name],
                        data=frame_body.encode_topic(name, config))


def append(name: str, seq: int, ts: int = 1000, flags: int = 0, data: bytes = b'{"d":1}',
           node: bytes = b"") -> bytes:
    return encode_frame(FrameType.APPEND, TIDS[name], seq, ts, data, b"", node, flags)


def batch(name: str, first: int, count: int, **kw) -> bytes:
    return b"".join(append(name, first + i, data=b'{"d":%d}' % (first + i), **kw)
                    for i in range(count))


def state(ledger: TopicLedger) -> dict:
    return {t.name: (t.head, t.count, t.bytes, t.last_write_ts, t.next_seq)
            for t in ledger.by_tid.values()}


def scan(ledger: TopicLedger, wal: bytes, max_frames: int = 10_000) -> tuple[int, bool]:
    return ledger.scan(wal, 0, len(wal), max_frames)


def both(monkeypatch, make, wal: bytes, max_frames: int = 10_000):
    """(ledger, scan result) with runs, then without."""
    out = []
    for runs in (append_run.RUN_FRAMES_MAX, 0):
        monkeypatch.setattr(append_run, "RUN_FRAMES_MAX", runs)
        ledger = make(runs)
        out.append((ledger, scan(ledger, wal, max_frames)))
    return out


def test_a_batch_is_taken_as_one_run(monkeypatch):
    wal = create("a") + batch("a", 1, 64)
    calls = []
    monkeypatch.setattr(TopicLedger, "store_run",
                        lambda self, topic, view, run: calls.append(run.count)
                        or topic.publish(run.first_seq, [0] * run.count, 0, 0))
    assert scan(TopicLedger(0), wal) == (len(wal), True)
    assert calls == [64]


def test_runs_end_at_another_topic_a_gap_other_flags_and_a_node(monkeypatch):
    """Frames that may not join a run are read alone, as before; the states agree."""
    wal = (create("a") + create("b") + batch("a", 1, 5) + batch("b", 1, 3)
           + batch("a", 6, 4, flags=FLAG_META) + batch("a", 10, 2, flags=FLAG_DURABLE)
           + append("a", 12, node=b"n1") + batch("a", 13, 3) + batch("a", 20, 3)
           + batch("b", 4, 2))
    (runs, r1), (plain, r2) = both(monkeypatch, lambda _: TopicLedger(0), wal)
    assert r1 == r2 == (len(wal), True)
    assert state(runs) == state(plain)
    assert state(runs)["a"][0] == 15 and state(runs)["b"][0] == 5   # the gap at 20 ignored
    assert runs.applied == plain.applied


def test_a_bad_checksum_inside_a_run_ends_the_log_there(monkeypatch):
    wal = bytearray(create("a") + batch("a", 1, 10))
    frame_len = HEADER.unpack_from(wal, len(create("a")))[0]
    sixth = len(create("a")) + 5 * (4 + frame_len)
    wal[sixth + 40] ^= 0x01        # a byte of the sixth record's data
    (runs, r1), (plain, r2) = both(monkeypatch, lambda _: TopicLedger(0), bytes(wal))
    assert r1 == r2 == (sixth, True)
    assert state(runs) == state(plain) and state(runs)["a"][0] == 5


def test_a_torn_last_frame_ends_the_run_before_it(monkeypatch):
    wal = create("a") + batch("a", 1, 8)
    torn = wal[:-10]
    (runs, r1), (plain, r2) = both(monkeypatch, lambda _: TopicLedger(0), torn)
    assert r1 == r2 and r1[1] is True
    assert state(runs) == state(plain) and state(runs)["a"][0] == 7


def test_the_frame_budget_holds_inside_a_run(monkeypatch):
    wal = create("a") + batch("a", 1, 20)
    (runs, r1), (plain, r2) = both(monkeypatch, lambda _: TopicLedger(0), wal, max_frames=8)
    assert r1 == r2 and r1[1] is False
    assert state(runs) == state(plain) and state(runs)["a"][0] == 7


def segment_files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("seg-*"))}


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from(NAMES), st.integers(1, 40),
                                  st.sampled_from([0, FLAG_META]),
                                  st.integers(0, 90)),
                        min_size=1, max_size=12),
       max_events=st.integers(1, 50), max_bytes=st.integers(40, 3000),
       max_age_ms=st.sampled_from([0, 5, 50]), buffer_bytes=st.integers(40, 2000))
def test_the_compactor_writes_the_same_segments_with_runs(tmp_path_factory, batches,
                                                         max_events, max_bytes, max_age_ms,
                                                         buffer_bytes):
    """Whatever the limits (records, bytes, age, the buffer's flush), a checkpoint that
    takes runs seals and flushes at the same records and writes the same bytes."""
    heads, ts, wal = dict.fromkeys(NAMES, 0), 1000, b"".join(map(create, NAMES))
    for name, count, flags, ts_step in batches:
        first = heads[name] + 1
        ts += ts_step
        wal += b"".join(append(name, first + i, ts + i % 7, flags, b'{"d":"%s"}' % (b"x" * i))
                        for i in range(count))
        heads[name] = first + count - 1
    limits = SegmentLimits(max_events, max_bytes, max_age_ms)
    roots = [tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("plain")]
    results = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(segment_ledger, "BUFFER_BYTES_MAX", buffer_bytes)
        for root, runs in zip(roots, (append_run.RUN_FRAMES_MAX, 0)):
            monkeypatch.setattr(append_run, "RUN_FRAMES_MAX", runs)
            ledger = SegmentLedger(RealFs(), str(root), limits, 0)
            results.append((scan(ledger, wal), state(ledger), dict(ledger.sealed)))
            ledger.flush_all()
            ledger.close()
    assert results[0] == results[1]
    assert segment_files(roots[0]) == segment_files(roots[1])
    assert len(segment_files(roots[0])) >= 2


def test_flushes_inside_a_run_match_the_per_record_path(tmp_path, monkeypatch):
    """A small buffer spills mid-run; the files are those of the per-record path."""
    wal = create("a") + batch("a", 1, 50)
    monkeypatch.setattr(segment_ledger, "BUFFER_BYTES_MAX", 300)
    flushes = []
    for runs in (append_run.RUN_FRAMES_MAX, 0):
        monkeypatch.setattr(append_run, "RUN_FRAMES_MAX", runs)
        root = tmp_path / f"r{runs}"
        os.makedirs(root)
        ledger = SegmentLedger(RealFs(), str(root), SegmentLimits(), 0)
        scan(ledger, wal)
        flushed = ledger.open[TIDS["a"]].written_count   # spilled during the scan
        ledger.flush_all()
        ledger.close()
        flushes.append((flushed, segment_files(root)))
    assert flushes[0] == flushes[1]
    assert flushes[0][0] > 0
