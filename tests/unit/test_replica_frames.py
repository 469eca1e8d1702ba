"""Raw Append frames in fetch answers (shard/replication/replica_frames.py, docs/PROTOCOL.md 6.27).

Goal: a follower that asks for frames ends with the leader's records and, for every seq it
holds, the leader's Append frame byte for byte; holes, records from segments and a
follower that asks for records keep working; an answer whose frames fail a check is
refused whole and the next honest one applied; a follower that crashes around raw frames
recovers exactly; AppendBatch frames travel whole, and the records of one that began before
the fetch's log end or lost records to a delete go as records. Method: a leader and a
follower shard of two nodes in one process (tools/testing/replica_pair.py); WAL files read
back frame by frame (storage/frame.py); corrupted answers built from a real one.
"""

import dataclasses
import os
import random
import shutil

import pytest

from tools.testing.crash_fs import CrashFs
from tools.testing.replica_pair import FOLLOWER, ReplicaPair, pair_env
from topics_actors.protocol.messages import DeleteRecords, ReplicaFetch
from topics_actors.shard.replication import replica_frames, replica_records
from topics_actors.shard.replication.replica_book import ReplicaAnswer
from topics_actors.shard.replication.replica_records import RECORDS_MAX
from topics_actors.storage import frame_body
from topics_actors.storage.frame import decode_at, encode_frame
from topics_actors.storage.frame_types import FLAG_TAG, FrameType
from topics_actors.topic_identity import topic_id

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"


def _pair(root, config: dict | None = None, crash: bool = False) -> ReplicaPair:
    fs = [CrashFs(grave=os.path.join(str(root), n + ".grave")) if crash else None
          for n in "ab"]
    return ReplicaPair(pair_env(root, "a", fs[0]), pair_env(root, "b", fs[1]), TOPIC,
                       config or {"durability": "fsync"})


def _records(first: int, count: int) -> list[list]:
    """Records of every shape: tags, nodes, meta, and plain ones."""
    return [[b'{"n":%d}' % n, "odd" if n % 2 else None, "nd" if n % 3 else None,
             b'{"m":%d}' % n if n % 5 == 0 else None] for n in range(first, first + count)]


def _write(pair: ReplicaPair, first: int, count: int, **kw) -> None:
    pair.leader.append(TOPIC, *_records(first, count), acks="leader", **kw)


def _copy(harness) -> dict[int, bytes]:
    core = harness.core
    topic = core.registry.get(TOPIC)
    return {seq: rec.envelope for seq in range(topic.earliest_seq(), topic.head + 1)
            if (rec := core.reader.read(topic, seq)) is not None}


def _appends(harness, ftype: int = FrameType.APPEND) -> dict[int, bytes]:
    """{seq: the frame's bytes} of the topic's frames of type `ftype` in the harness's WAL
    files (an AppendBatch's under its first seq)."""
    tid, out = topic_id(TOPIC), {}
    for _idx, path in harness.wal_files():
        with open(path, "rb") as handle:
            raw = handle.read()
        pos = 0
        while (frame := decode_at(raw, pos, len(raw))) is not None:
            if frame.type == ftype and frame.topic_id == tid:
                out[frame.seq] = raw[pos:pos + frame.size]
            pos += frame.size
    return out


def _same_copies(pair: ReplicaPair) -> None:
    leader, follower = _copy(pair.leader), _copy(pair.follower)
    assert leader == follower and leader
    ours, theirs = _appends(pair.leader), _appends(pair.follower)
    assert set(follower) <= set(theirs)
    assert all(theirs[seq] == ours[seq] for seq in follower)


def _fetch(pair: ReplicaPair, frames: bool = True, max_bytes: int = 0) -> dict:
    """The leader's answer to the follower's next fetch (never parked)."""
    (_name, _endpoint, ask), = pair.follower.core.replicas.follower.requests()
    assert isinstance(ask, ReplicaFetch) and ask.frames
    return pair.leader.call(dataclasses.replace(ask, wait_ms=0, frames=frames,
                                                max_bytes=max_bytes or ask.max_bytes))


def _apply(pair: ReplicaPair, body: dict) -> dict:
    return pair.follower.call(ReplicaAnswer(TOPIC, "replica_fetch", body))


def _frames_of(frames: bytes) -> list:
    out, pos = [], 0
    while pos < len(frames):
        frame = decode_at(frames, pos, len(frames))
        out.append(frame)
        pos += frame.size
    return out


def test_the_follower_writes_the_leaders_frames_byte_for_byte(tmp_path):
    pair = _pair(tmp_path)
    try:
        for first in range(0, 300, 60):
            _write(pair, first, 60)
            pair.rounds(2)
        body = _fetch(pair)
        assert body["frames"] == b"" and body["records"] == []      # caught up
        _write(pair, 300, 40)
        body = _fetch(pair)
        assert body["records"] == [] and len(_frames_of(body["frames"])) == 40
        pair.rounds(2)
        _same_copies(pair)
        assert pair.follower.core.registry.get(TOPIC).head == 340
    finally:
        pair.close()


def test_frames_are_only_the_topics_appends_within_the_budget(tmp_path):
    pair = _pair(tmp_path, {"durability": "disk"})
    try:
        for first in range(0, 30, 10):        # an IdemKey frame after each append
            _write(pair, first, 10, idempotency_key=f"k{first}")
        body = _fetch(pair)
        frames = _frames_of(body["frames"])
        assert [f.seq for f in frames] == list(range(1, 31))
        assert {(f.type, f.topic_id) for f in frames} == {(FrameType.APPEND, topic_id(TOPIC))}
        small = _fetch(pair, max_bytes=500)
        used = len(small["frames"])
        assert 0 < used <= 500 and small["end_leo"] == 1 + len(_frames_of(small["frames"]))
        _apply(pair, small)
        pair.rounds(3)
        _same_copies(pair)
    finally:
        pair.close()


def test_an_answer_holds_at_most_records_max_frames_and_the_read_memo_serves_it(
        tmp_path, monkeypatch):
    pair = _pair(tmp_path, {"durability": "memory"})
    reads, read_for = [], replica_records.read_for
    monkeypatch.setattr(replica_records, "read_for",
                        lambda *args: reads.append(args[2]) or read_for(*args))
    try:
        for first in range(0, RECORDS_MAX + 500, 500):
            _write(pair, first, 500)
        body = _fetch(pair)
        assert len(_frames_of(body["frames"])) == RECORDS_MAX
        assert body["end_leo"] == RECORDS_MAX + 1
        assert _fetch(pair)["frames"] == body["frames"]
        assert reads == [1]                         # the same fetch again: read once
        records = _fetch(pair, frames=False)
        assert "frames" not in records and len(records["records"]) == RECORDS_MAX
        pair.rounds(3)
        _same_copies(pair)
    finally:
        pair.close()


def test_records_from_segments_then_frames_from_the_wal(tmp_path):
    leader_env = pair_env(tmp_path, "a")
    pair = ReplicaPair(leader_env, pair_env(tmp_path, "b"), TOPIC, {"durability": "fsync"})
    try:
        _write(pair, 0, 50)
        leader_env.checkpoint([pair.leader])          # seqs 1..50 move into segments
        assert pair.leader.core.registry.get(TOPIC).absorbed == 50
        _write(pair, 50, 30)
        body = _fetch(pair)
        assert [r[0] for r in body["records"]] == list(range(1, 51))
        assert [f.seq for f in _frames_of(body["frames"])] == list(range(51, 81))
        bad = {**body, "records": body["records"][:-1] + [[55, *body["records"][-1][1:]]]}
        assert _apply(pair, bad)["applied"] == 0           # a frame not after the records
        assert pair.follower.core.stats.fetch_answers_refused == 1
        pair.rounds(3)
        _same_copies(pair)
    finally:
        pair.close()


def test_a_follower_that_asks_for_records_gets_records(tmp_path):
    pair = _pair(tmp_path)
    try:
        _write(pair, 0, 40)
        body = _fetch(pair, frames=False)      # an older follower, or an older leader's
        assert "frames" not in body and len(body["records"]) == 40      # answer to a new one
        assert _apply(pair, body)["applied"] == 40
        _write(pair, 40, 10)
        pair.rounds(2)
        _same_copies(pair)
    finally:
        pair.close()


def test_deleted_and_evicted_records_replicate_as_holes(tmp_path):
    pair = _pair(tmp_path, {"durability": "fsync", "cap_records": 60})
    try:
        _write(pair, 0, 40)
        for _ in range(3):
            pair.committed_round()
        pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match="odd"), 0)
        pair.leader.core.commit()
        for _ in range(4):
            pair.committed_round()
        _write(pair, 40, 40)                            # seqs 1..20 evicted (cap 60)
        follower_dir = pair.follower.data_dir           # a fresh copy fetches it all again
        pair.follower.crash()
        shutil.rmtree(follower_dir)
        pair.follower = pair_env(tmp_path / "fresh", "b").single(node_id=FOLLOWER)
        pair.roles()
        body = _fetch(pair)
        seqs = [f.seq for f in _frames_of(body["frames"])]
        assert seqs == [s for s in range(21, 81) if s > 40 or s % 2]      # "odd" n: even seq
        for _ in range(4):
            pair.committed_round()
        _same_copies(pair)
        assert sorted(_copy(pair.follower)) == seqs
    finally:
        pair.close()


def _flip(body: dict) -> None:
    frames = bytearray(body["frames"])
    frames[60] ^= 0x20                                 # inside the first envelope
    body["frames"] = bytes(frames)


def _reframe(body: dict, index: int, **change) -> None:
    """Frame `index` encoded again, with `change` (and a valid checksum)."""
    frames = _frames_of(body["frames"])
    f = frames[index]
    fields = {"ftype": f.type, "topic_id": f.topic_id, "seq": f.seq, "ts": f.ts,
              "data": f.data, "tag": (f.tag or "").encode(), "node": (f.node or "").encode(),
              "flags": f.flags, **change}
    raw = body["frames"]
    start = sum(g.size for g in frames[:index])
    body["frames"] = raw[:start] + encode_frame(**fields) + raw[start + f.size:]


def _control_frame(body: dict) -> None:
    first = _frames_of(body["frames"])[0]
    mark = encode_frame(FrameType.HEAD_WATERMARK, first.topic_id, first.seq, first.ts,
                        frame_body.encode_u64(first.seq))
    body["frames"] = mark + body["frames"]


CORRUPTIONS = {
    "flipped_byte": _flip,
    "other_topic": lambda body: _reframe(body, 0, topic_id=topic_id("other")),
    "seq_back": lambda body: _reframe(body, 1, seq=1),
    "seq_repeated": lambda body: body.__setitem__("frames", body["frames"] * 2),
    "truncated": lambda body: body.__setitem__("frames", body["frames"][:-5]),
    "not_an_append": _control_frame,
    "insane_flags": lambda body: _reframe(body, 0, tag=b"", node=b"", flags=FLAG_TAG),
    "past_end_leo": lambda body: body.__setitem__("end_leo", 5),
    "not_bin": lambda body: body.__setitem__("frames", [body["frames"]]),
    "empty_but_not_bin": lambda body: body.__setitem__("frames", []),
}


@pytest.mark.parametrize("corrupt", sorted(CORRUPTIONS))
def test_an_answer_with_a_bad_frame_is_refused_whole_and_the_next_applied(tmp_path,
                                                                          corrupt):
    pair = _pair(tmp_path)
    try:
        _write(pair, 0, 20)
        _write(pair, 20, 20)
        body = _fetch(pair)
        assert len(_frames_of(body["frames"])) == 40
        CORRUPTIONS[corrupt](body)
        core = pair.follower.core
        stats = dataclasses.replace(core.stats)
        assert _apply(pair, body)["applied"] == 0
        assert core.stats.fetch_answers_refused == stats.fetch_answers_refused + 1
        assert core.stats.batches == stats.batches                  # nothing written
        topic = core.registry.get(TOPIC)
        assert (topic.head, topic.next_seq) == (0, 1)
        assert _appends(pair.follower) == {}
        pair.rounds(3)                                              # fetched again
        _same_copies(pair)
        assert topic.head == 40
    finally:
        pair.close()


def test_holes_among_the_frames_split_their_runs():
    tid = topic_id(TOPIC)
    frames = b"".join(encode_frame(FrameType.APPEND, tid, seq, 7, b'{"d":1}')
                      for seq in (3, 4, 7, 8, 9))
    runs = replica_frames.check(tid, frames, 2, 11)
    assert [(r.first, len(r.offsets)) for r in runs] == [(3, 2), (7, 3)]
    assert bytes(runs[0].frames) + bytes(runs[1].frames) == frames
    assert all(decode_at(run.frames, offset, len(run.frames)) is not None
               for run in runs for offset in run.offsets)
    assert [r.payload_bytes for r in runs] == [2, 3]
    with pytest.raises(replica_frames.BadFrames):
        replica_frames.check(tid, frames, 3, 11)                    # seq 3 is held


@pytest.mark.parametrize("committed", [True, False])
def test_a_follower_crashing_around_raw_frames_recovers_exactly(tmp_path, committed):
    pair = _pair(tmp_path, crash=True)
    try:
        _write(pair, 0, 50)
        pair.rounds(2)
        _write(pair, 50, 50)
        body = _fetch(pair)
        assert len(_frames_of(body["frames"])) == 50
        core = pair.follower.core
        core.submit(b"p", 1, ReplicaAnswer(TOPIC, "replica_fetch", body), 0)
        if committed:
            core.commit()
        pair.follower.crash()
        pair.follower.fs.power_loss("drop", random.Random(3))
        pair.follower.start()
        pair.roles()
        assert pair.follower.core.registry.get(TOPIC).head == (100 if committed else 50)
        pair.rounds(4)
        _same_copies(pair)
        assert pair.follower.core.registry.get(TOPIC).head == 100
    finally:
        pair.close()


def test_an_answer_arriving_at_a_full_batch_is_asked_again_not_lost(tmp_path, monkeypatch):
    """A fetch answer that finds the follower's batch full moves nothing: the follower
    asks the same range again and applies it then (it used to wait for a commit that
    would never come, and stop replicating the topic)."""
    pair = _pair(tmp_path)
    try:
        _write(pair, 0, 20)
        stager = pair.follower.core.stager
        full = iter([True])
        monkeypatch.setattr(stager, "inbox_full", lambda: next(full, False))
        assert _apply(pair, _fetch(pair))["applied"] == 0
        assert pair.follower.core.registry.get(TOPIC).head == 0
        assert stager.stats.throttled == 1
        pair.rounds()
        assert pair.follower.core.registry.get(TOPIC).head == 20
        _same_copies(pair)
    finally:
        pair.close()


# --- AppendBatch frames ----------------------------------------------------------------------

def _plain(pair: ReplicaPair, first: int, count: int) -> None:
    """A batch of plain records: the leader writes it as one AppendBatch frame."""
    pair.leader.append(TOPIC, *[[b'{"n":%d}' % n] for n in range(first, first + count)],
                       acks="leader")


def test_batch_frames_travel_whole_and_the_follower_holds_them_byte_for_byte(tmp_path):
    pair = _pair(tmp_path)
    try:
        _plain(pair, 1, 20)
        _plain(pair, 21, 30)
        body = _fetch(pair)
        frames = _frames_of(body["frames"])
        assert body["records"] == [] and body["end_leo"] == 51
        assert [(f.type, f.seq) for f in frames] == [(FrameType.APPEND_BATCH, 1),
                                                     (FrameType.APPEND_BATCH, 21)]
        assert _apply(pair, body)["applied"] == 50
        pair.rounds(2)
        assert _copy(pair.follower) == _copy(pair.leader)
        batches = _appends(pair.leader, FrameType.APPEND_BATCH)
        assert _appends(pair.follower, FrameType.APPEND_BATCH) == batches and len(batches) == 2
    finally:
        pair.close()


def test_a_fetch_from_inside_a_batch_gets_its_rest_as_records_then_the_frames(tmp_path):
    pair = _pair(tmp_path)
    try:
        _plain(pair, 1, 20)
        _plain(pair, 21, 10)
        (_name, _endpoint, ask), = pair.follower.core.replicas.follower.requests()
        body = pair.leader.call(dataclasses.replace(ask, wait_ms=0, fetch_leo=11))
        assert [r[0] for r in body["records"]] == list(range(11, 21))
        assert body["records"][0][2] == b'{"d":{"n":11}}'
        assert [(f.type, f.seq) for f in _frames_of(body["frames"])] == [
            (FrameType.APPEND_BATCH, 21)]
        assert body["end_leo"] == 31
    finally:
        pair.close()


def test_a_batch_a_delete_took_records_of_goes_as_records(tmp_path):
    pair = _pair(tmp_path)
    try:
        _plain(pair, 1, 20)
        for _ in range(3):
            pair.committed_round()
        pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, before_seq=6), 0)
        pair.leader.core.commit()
        for _ in range(4):                          # the delete, applied on every replica
            pair.committed_round()
        _plain(pair, 21, 10)
        (_name, _endpoint, ask), = pair.follower.core.replicas.follower.requests()
        body = pair.leader.call(dataclasses.replace(ask, wait_ms=0, fetch_leo=1))
        assert [r[0] for r in body["records"]] == list(range(6, 21))
        assert [f.seq for f in _frames_of(body["frames"])] == [21]
        for _ in range(4):
            pair.committed_round()
        assert _copy(pair.follower) == _copy(pair.leader)
    finally:
        pair.close()
