"""Recovery (spec/storage.md 4 and the invariants of 7): restart must rebuild the state that
was acked, cut torn tails, honour head reservations and survive shard-count changes.

Method: drive a ShardCore in-process, then either close it (clean shutdown) or crash it
(drop it without close: nothing staged is written and nothing more is synced), optionally
damage the WAL by hand, and replay into a fresh core.
"""

from __future__ import annotations

import os

import pytest

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import Append, DeleteTopic, Diff, PutTopic, RepairTopic
from topics_actors.shard import replay as replay_module
from topics_actors.shard.record_append import HEAD_RESERVE
from topics_actors.storage import failpoint
from topics_actors.record_envelope import build as append_envelope
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_identity import topic_id


def rec(data: bytes = b'{"x":1}', tag=None, node=None, meta=None) -> list:
    return [data, tag, node, meta]


def frames_of(h, path: str):
    scan = FileScan(h.fs, path)
    frames = list(scan.frames())
    scan.close()
    return frames, scan


def last_file(h) -> str:
    return h.wal_files()[-1][1]


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def populate(h) -> None:
    h.put("fs", durable=True, ttl_ms=0, cap_records=0)
    h.put("dk", priority=7)
    h.put("mem", durability="memory", idempotency_window_ms=5000)
    h.put("q", type="queue", lease_ms=1000)
    h.call(Append("fs", [rec(b'{"a":1}', "t1", "n1", b'{"m":1}'), rec(b"[]")]))
    h.call(Append("dk", [rec(b'"x"', "é")], node="node-é"))
    h.batch(Append("mem", [rec(b"1")]), Append("fs", [rec(b"2")]), Append("q", [rec(b"3")]))
    for i in range(30):
        h.call(Append("dk", [rec(b"%d" % i)]))


# --- identical state ----------------------------------------------------------------------

def test_clean_restart_yields_identical_state(shard):
    populate(shard)
    before = shard.snapshot()
    assert before["dk"][0] == 31 and before["fs"][0] == 3
    shard.restart(crash=False)
    assert shard.snapshot() == before
    shard.restart(crash=False)
    assert shard.snapshot() == before
    assert shard.append("dk")["first_seq"] == 32           # next append gets head + 1
    assert shard.append("fs")["first_seq"] == 4


def test_crash_restart_keeps_every_acked_record(shard):
    populate(shard)
    before = shard.snapshot()
    shard.restart(crash=True)
    after = shard.snapshot()
    assert after.keys() == before.keys()
    for name in before:
        assert after[name][2] == before[name][2]            # config
        assert after[name][3] == before[name][3]            # record bytes, seqs, ts, tags
    for name in ("fs", "mem"):
        assert after[name][:2] == before[name][:2]           # no reservation: exact head
    for name in ("dk", "q"):                                 # disk class (the default)
        assert after[name][0] == 1 + HEAD_RESERVE             # padded to the reservation
        assert after[name][1] == before[name][1]
    shard.restart(crash=True)                                # recovery twice: same state
    assert shard.snapshot() == after


def test_staged_but_uncommitted_work_is_lost_by_a_crash(shard):
    shard.put("f", durable=True)
    shard.append("f")
    shard.core.submit(b"p", 1, Append("f", [rec(b'"staged"')]), 0)
    shard.core.submit(b"p", 2, PutTopic("never", None), 0)
    shard.restart(crash=True)
    assert shard.get("f")["head_seq"] == 1 and not shard.exists("never")


def test_clean_close_commits_everything_accepted(shard):
    shard.put("f", durable=True)
    shard.core.submit(b"p", 1, Append("f", [rec(b'"accepted"')]), 0)
    shard.restart(crash=False)
    assert [r[2] for r in shard.records("f")] == [b'{"d":"accepted"}']


# --- deletes and recreation ----------------------------------------------------------------

def test_topic_delete_survives_restart(shard):
    shard.append("a", rec())
    shard.append("b", rec())
    shard.call(DeleteTopic("a"))
    for crash in (True, False):
        shard.restart(crash=crash)
        assert not shard.exists("a") and shard.exists("b")


@pytest.mark.parametrize("durable", [True, False])
def test_recreated_topic_restarts_at_seq_1(shard, durable):
    shard.put("t", durable=durable)
    shard.append("t", rec(b"1"), rec(b"2"), rec(b"3"))
    shard.call(DeleteTopic("t"))
    shard.put("t", durable=durable)
    assert shard.append("t", rec(b'"new"'))["first_seq"] == 1

    def check():
        assert [r[2] for r in shard.records("t")] == [b'{"d":"new"}']
        reply = shard.call(Diff("t", 3))
        assert reply["tombstone"]["reason"] == "recreated"
        assert reply["tombstone"]["gap_to"] == reply["head_seq"]
        assert [r[0] for r in reply["records"]] == [1]
    check()
    shard.restart(crash=False)
    check()
    assert shard.get("t")["head_seq"] == 1


# --- torn tails -----------------------------------------------------------------------------

def _torn_tail_case(shard, damage):
    shard.put("f", durable=True)
    for i in range(1, 6):
        shard.append("f", rec(b"%d" % i))
    shard.close()
    path = last_file(shard)
    frames, scan = frames_of(shard, path)
    damage(path, frames, scan)
    return path


@pytest.mark.parametrize("garbage", [b"\x01", b"\x2a\x00\x00\x00\x01garbage",
                                     b"\xff" * 100, b"\x00\x00\x00\x00\x07"])
def test_garbage_after_the_log_is_truncated(shard, garbage):
    path = _torn_tail_case(shard, lambda p, f, s: patch(p, s.valid_len, garbage))
    valid = frames_of(shard, path)[1].valid_len
    shard.start()
    assert os.path.getsize(path) == valid                   # physically cut
    assert shard.get("f")["head_seq"] == 5
    assert shard.append("f", rec(b'"after"'))["first_seq"] == 6
    shard.restart(crash=True)
    assert [r[2] for r in shard.records("f")][-2:] == [b'{"d":5}', b'{"d":"after"}']


def test_flipped_byte_in_the_last_frame_is_cut(shard):
    def damage(path, frames, scan):
        last = frames[-1]
        assert last.type == FrameType.APPEND and last.seq == 5
        patch(path, last.offset + last.size - 10, b"\xee")
    path = _torn_tail_case(shard, damage)
    shard.start()
    assert shard.get("f")["head_seq"] == 4
    frames, scan = frames_of(shard, path)
    assert os.path.getsize(path) == scan.valid_len and frames[-1].seq == 4
    assert shard.append("f", rec(b'"again"'))["first_seq"] == 5
    shard.restart(crash=True)
    assert [r[2] for r in shard.records("f")] == [b'{"d":1}', b'{"d":2}', b'{"d":3}',
                                                  b'{"d":4}', b'{"d":"again"}']
    shard.restart(crash=False)
    assert shard.get("f")["head_seq"] == 5


def test_half_written_last_frame_is_cut(shard):
    def damage(path, frames, scan):
        last = frames[-1]
        with open(path, "r+b") as handle:
            handle.truncate(last.offset + last.size // 2)
    _torn_tail_case(shard, damage)
    shard.start()
    assert shard.get("f")["head_seq"] == 4
    assert shard.append("f")["first_seq"] == 5


def test_corruption_in_an_older_file_loses_a_suffix_not_a_middle(env):
    h = env.single(file_bytes=4096)
    h.put("f", durable=True)
    for i in range(1, 61):
        h.append("f", rec(b'"%d-%s"' % (i, b"x" * 80)))
    files = h.wal_files()
    assert len(files) >= 3
    h.close()
    frames, _ = frames_of(h, files[0][1])
    victim = [f for f in frames if f.type == FrameType.APPEND][-3]
    patch(files[0][1], victim.offset + 20, b"\x99")     # its seq: the checksum fails
    h.start()
    # Frames follow the damage: the topic its header names is quarantined, never cut short
    # silently; the repair cuts it back to its last valid record.
    with pytest.raises(TopicsError) as error:
        h.get("f")
    assert error.value.code is ErrorCode.QUARANTINED
    [found] = h.core.quarantine.status()["quarantine"]
    assert found["first_bad_seq"] == victim.seq
    assert found["would_lose"]["records"] == 60 - victim.seq + 1
    assert h.call(RepairTopic("f"))["lost_records"] == 60 - victim.seq + 1
    head = h.get("f")["head_seq"]
    assert head == victim.seq - 1
    assert [r[0] for r in h.records("f")] == list(range(1, head + 1))
    assert h.append("f")["first_seq"] == head + 1
    before = h.snapshot()
    h.restart(crash=True)
    assert h.snapshot() == before
    h.crash()


def test_out_of_sequence_append_quarantines_its_topic(shard):
    """A gap in a topic's seqs (a lost frame before a valid one) is a mismatch, never
    passed over silently: the topic answers quarantined, its neighbour serves."""
    shard.put("f", durable=True)
    shard.put("n", durable=True)
    shard.append("f", rec(b"1"), rec(b"2"))
    shard.append("n", rec(b"1"))
    shard.close()
    path = last_file(shard)
    _, scan = frames_of(shard, path)
    forged = bytearray()
    encode(forged, FrameType.APPEND, 0, topic_id("f"), 5, 1, append_envelope(b'"gap"', None))
    patch(path, scan.valid_len, bytes(forged))
    shard.start()
    with pytest.raises(TopicsError) as error:
        shard.records("f")
    assert error.value.code is ErrorCode.QUARANTINED
    assert error.value.detail["reason"].startswith("append of seq 5 after head 2")
    assert [r[0] for r in shard.records("n")] == [1]
    assert shard.append("n", rec(b"2"))["first_seq"] == 2
    shard.restart(crash=True)                      # still quarantined: nothing healed it
    assert "f" in shard.core.quarantine.topics
    assert [r[0] for r in shard.records("n")] == [1, 2]


def test_out_of_sequence_append_is_cut_under_ignore(env, caplog):
    env.layout(1)
    shard = env.shard(policy="ignore").start()
    shard.put("f", durable=True)
    shard.append("f", rec(b"1"), rec(b"2"))
    shard.close()
    path = last_file(shard)
    _, scan = frames_of(shard, path)
    forged = bytearray()
    tid = topic_id("f")
    for seq, body in ((5, b'"gap"'), (2, b'"dup"')):
        encode(forged, FrameType.APPEND, 0, tid, seq, 1, append_envelope(body, None))
    patch(path, scan.valid_len, bytes(forged))
    shard.start()
    assert shard.get("f")["head_seq"] == 2
    assert [r[2] for r in shard.records("f")] == [b'{"d":1}', b'{"d":2}']
    assert not shard.core.quarantine.topics and shard.core.quarantine.total == 1
    assert "event=recovery_truncated" in caplog.text and "topic=f" in caplog.text
    assert shard.append("f", rec(b'"three"'))["first_seq"] == 3
    shard.restart(crash=True)
    assert [r[2] for r in shard.records("f")] == [b'{"d":1}', b'{"d":2}', b'{"d":"three"}']


# --- head reservations (disk class) ---------------------------------------------------------

def test_disk_crash_pads_to_the_reservation_and_keeps_exact_marks(shard):
    shard.put("d")
    for i in range(1, 4):
        shard.append("d", rec(b"%d" % i))
    reserved = 1 + HEAD_RESERVE                    # set by the first append
    shard.restart(crash=True)
    assert shard.get("d")["head_seq"] == reserved
    assert shard.get("d")["count"] == 3
    reply = shard.append("d", rec(b'"next"'))
    assert reply["first_seq"] == reserved + 1
    shard.restart(crash=True)
    state = shard.get("d")
    assert state["head_seq"] == reserved + 1 + HEAD_RESERVE
    assert [(r[0], r[2]) for r in shard.records("d")] == [
        (1, b'{"d":1}'), (2, b'{"d":2}'), (3, b'{"d":3}'), (reserved + 1, b'{"d":"next"}')]
    shard.restart(crash=True)                     # no growth without new appends
    assert shard.get("d")["head_seq"] == state["head_seq"]


def test_clean_close_does_not_pad(shard):
    shard.put("d")
    shard.append("d", rec(b"1"), rec(b"2"))
    shard.restart(crash=False)
    assert shard.get("d")["head_seq"] == 2
    shard.restart(crash=True)                     # the exact mark also holds after a crash
    assert shard.get("d")["head_seq"] == 2
    assert shard.append("d")["first_seq"] == 3
    shard.restart(crash=False)
    assert [r[0] for r in shard.records("d")] == [1, 2, 3]


def test_crash_during_replay_then_restart_is_identical(shard, monkeypatch):
    populate(shard)
    shard.crash()
    monkeypatch.setattr(failpoint, "_ARMED", {"recovery::mid_replay": "raise"})
    with pytest.raises(OSError):
        shard.start()
    shard.core.wal.writer.prealloc.close()
    shard.core.wal.files.close()
    monkeypatch.setattr(failpoint, "_ARMED", {})
    first = shard.start().snapshot()
    shard.restart(crash=True)
    assert shard.snapshot() == first


@pytest.mark.parametrize("op", ["map_read", "file_size", "set_len", "sync_all", "open",
                                "sync_dir"])
def test_io_error_during_recovery_aborts_startup(shard, op):
    """Invariant 66: never an empty start over an unreadable or uncuttable WAL."""
    populate(shard)
    shard.crash()
    if op in ("set_len", "sync_all"):   # a torn tail: recovery must cut it off
        _, scan = frames_of(shard, last_file(shard))
        patch(last_file(shard), scan.valid_len, b"\xab" * 16)
    before = shard.fs.count(op)
    shard.fs.fail(op)
    with pytest.raises(OSError):
        shard.start()
    assert shard.fs.fired == [(op, before, "eio")]
    shard.core.wal.writer.prealloc.close()
    shard.core.wal.files.close()
    shard.start()
    assert shard.get("fs")["head_seq"] == 3 and shard.get("dk")["count"] == 31


def test_write_error_after_the_bytes_landed_is_never_visible(shard, monkeypatch):
    """Regression: an error at wal::after_write used to skip the undo of the batch."""
    shard.put("m", durability="memory")
    shard.append("m", rec(b"1"))
    monkeypatch.setattr(failpoint, "_ARMED", {"wal::after_write": "raise"})
    reply = shard.batch(Append("m", [rec(b'"failed"')]))[0]
    monkeypatch.setattr(failpoint, "_ARMED", {})
    assert isinstance(reply, TopicsError)
    shard.restart(crash=True)
    assert shard.get("m")["head_seq"] == 1


def test_failed_batch_with_a_failed_erase_is_never_visible(shard):
    """When zero-filling a failed batch fails too, the writer cuts the file at the batch."""
    shard.put("f", durable=True)
    shard.append("f", rec(b"1"))
    fs = shard.fs
    fs.fail("write_at", kind="short")                        # half the batch lands ...
    fs.fail("write_at", at=fs.count("write_at") + 1, always=True)   # ... then EIO, erase too
    reply = shard.batch(Append("f", [rec(b'"%d"' % i) for i in range(2, 8)]))[0]
    assert isinstance(reply, TopicsError) and shard.core.wal.writer.latched
    fs.clear()
    shard.restart(crash=True)
    assert shard.get("f")["head_seq"] == 1                   # invariant 3


# --- durability classes ------------------------------------------------------------------

def test_ephemeral_keeps_config_but_no_records(shard):
    shard.put("e", durability="ephemeral", ttl_ms=60_000, priority=3)
    shard.append("e", rec(b"1"), rec(b"2"))
    config = shard.get("e")["config"]
    for crash in (True, False):
        shard.restart(crash=crash)
        state = shard.get("e")
        assert state["config"] == config and state["count"] == 0
        assert shard.records("e") == []
        assert shard.call(Diff("e", 2))["tombstone"]["reason"] == "recreated"


def test_ephemeral_to_disk_keeps_the_head(shard):
    shard.put("e", durability="ephemeral")
    shard.append("e", rec(), rec(), rec())
    shard.put("e", durability="disk")
    assert shard.append("e", rec(b'"logged"'))["first_seq"] == 4
    shard.restart(crash=False)
    assert shard.get("e")["head_seq"] == 4
    assert [(r[0], r[2]) for r in shard.records("e")] == [(4, b'{"d":"logged"}')]


def _cut_after_last_sync(h, predicate) -> None:
    """Power loss: keep the WAL up to the end of the first frame matching `predicate` (the
    last fsynced frame); the buffered frames after it are lost."""
    path = last_file(h)
    frames, _ = frames_of(h, path)
    mark = next(f for f in frames if predicate(f))
    with open(path, "r+b") as handle:
        handle.truncate(mark.offset + mark.size)


def test_disk_power_loss_pads_over_lost_acked_writes(shard):
    shard.put("d")
    shard.append("d", rec(b"1"))                             # fsyncs HeadWatermark(257)
    acked = [shard.append("d", rec(b"%d" % i))["last_seq"] for i in range(2, 9)]
    shard.crash()
    _cut_after_last_sync(shard, lambda f: f.type == FrameType.APPEND and f.seq == 1)
    shard.start()
    head = shard.get("d")["head_seq"]
    assert acked[-1] <= head <= acked[-1] + HEAD_RESERVE    # invariant 8
    assert [r[0] for r in shard.records("d")] == [1]          # lost seqs are silent holes
    assert shard.append("d")["first_seq"] == head + 1 > acked[-1]


def test_exact_mark_of_a_config_switch_keeps_the_reservation(shard):
    """Regression: an ephemeral -> disk switch used to log an exact head mark below the
    outstanding reservation, so power loss led to reissued acked seqs."""
    shard.put("d")
    shard.append("d", rec(b"1"), rec(b"2"), rec(b"3"))       # reservation 3 + 256
    shard.put("d", durability="ephemeral")
    shard.put("d", durability="disk")                         # logs an exact mark at 3
    acked = [shard.append("d", rec(b"%d" % i))["last_seq"] for i in range(4, 11)]
    shard.crash()
    _cut_after_last_sync(shard, lambda f: f.type == FrameType.HEAD_WATERMARK and f.seq == 3)
    shard.start()
    assert shard.get("d")["head_seq"] >= acked[-1] == 10      # invariants 8 and 10
    assert shard.append("d")["first_seq"] > 10


def test_memory_never_recovers_above_the_acked_head(shard):
    shard.put("m", durability="memory")
    acked = [shard.append("m", rec(b"%d" % i))["last_seq"] for i in range(1, 11)]
    shard.fs.fail("write_at")
    assert isinstance(shard.batch(Append("m", [rec()] * 5))[0], TopicsError)
    shard.restart(crash=True)
    assert shard.get("m")["head_seq"] == acked[-1] == 10
    # power loss: the un-fsynced suffix of the WAL is gone (cut inside record 7)
    shard.crash()
    path = last_file(shard)
    frames, _ = frames_of(shard, path)
    seventh = next(f for f in frames if f.type == FrameType.APPEND and f.seq == 7)
    with open(path, "r+b") as handle:
        handle.truncate(seventh.offset + 30)
    shard.start()
    head = shard.get("m")["head_seq"]
    assert head == 6
    assert [r[2] for r in shard.records("m")] == [b'{"d":%d}' % i for i in range(1, 7)]


def test_many_files_replay_in_order(env):
    h = env.single(file_bytes=2048)
    h.put("a", durable=True)
    h.put("b")
    for i in range(80):
        h.batch(Append("a", [rec(b"%d" % i)]), Append("b", [rec(b"%d" % i)] * 2))
    assert len(h.wal_files()) > 5
    before = h.snapshot()
    h.restart(crash=False)
    assert h.snapshot() == before
    h.crash()


def _progress_case(env, monkeypatch, file_bytes: int):
    monkeypatch.setattr(replay_module, "PROGRESS_INTERVAL_NS", 0)   # no clock in the way
    monkeypatch.setattr(replay_module, "CHUNK_FRAMES", 100)
    h = env.single(file_bytes=file_bytes)
    for _ in range(3):     # tagged, so each record is a frame of its own (plain ones would
        h.call(Append("p", [rec(tag="p")] * 3000))   # make one AppendBatch frame)
    assert h.progress == []                                  # the first start had no WAL
    files = len(h.wal_files())
    h.restart(crash=False)
    assert h.get("p")["head_seq"] == 9000
    progress = h.progress
    h.crash()
    expected = 9000 // 100
    assert expected <= len(progress) <= expected + 2 * files  # + a short chunk per file
    assert progress == sorted(progress) and all(0 <= p < 1 for p in progress)
    return files, progress


def test_replay_reports_monotone_progress_below_one(env, monkeypatch):
    files, progress = _progress_case(env, monkeypatch, 1 << 20)
    assert files == 1 and progress[0] < 0.01 and progress[-1] > 0.4   # zeros follow the log


def test_replay_reports_progress_over_many_small_files(env, monkeypatch):
    """Regression: the progress frame count used to restart for every file."""
    files, progress = _progress_case(env, monkeypatch, 16 * 1024)
    assert files >= 3                                         # each holds 3000 frames
    assert progress[0] < 0.1 and progress[-1] > 0.9


# --- shard count changes ---------------------------------------------------------------------

NAMES = [f"topic-{i}" for i in range(12)]


def _fill(cluster, env, rounds: int, tag: str, gone=()) -> dict[str, list[bytes]]:
    written: dict[str, list[bytes]] = {}
    for i, name in enumerate(NAMES):
        if name in gone:
            continue
        h = env.owner(cluster, name)
        if rounds == 0:
            h.put(name, durability=("fsync", "disk", "memory")[i % 3])
        for r in range(2):
            data = b'"%s-%d"' % (tag.encode(), r)
            h.append(name, rec(data))
            written.setdefault(name, []).append(b'{"d":' + data + b"}")
    return written


def _check(cluster, env, expected: dict[str, list[bytes]], gone: set[str]):
    for name in NAMES:
        owner = env.owner(cluster, name)
        others = [h for h in cluster if h is not owner]
        assert not any(h.exists(name) for h in others)
        if name in gone:
            assert not owner.exists(name)
            continue
        assert [r[2] for r in owner.records(name)] == expected[name], name


@pytest.mark.parametrize("counts", [(3, 2, 5), (1, 4, 1), (4, 3, 7)])
def test_shard_count_change_loses_nothing(env, counts):
    first, second, third = counts
    cluster = env.cluster(first)
    expected = _fill(cluster, env, 0, "g1")
    cluster[0].batch()                                         # an empty turn is harmless
    env.owner(cluster, NAMES[0]).call(DeleteTopic(NAMES[0]))
    gone = {NAMES[0]}
    for h in cluster:
        h.close()

    cluster = env.cluster(second)
    _check(cluster, env, expected, gone)
    for name, more in _fill(cluster, env, 1, "g2", gone).items():
        expected[name] += more
    for h in cluster:
        h.crash()

    cluster = env.cluster(third)
    _check(cluster, env, expected, gone)
    for name in NAMES[1:]:
        h = env.owner(cluster, name)
        reply = h.append(name, rec(b'"g3"'))
        assert reply["first_seq"] > max(r[0] for r in h.records(name)[:-1])
    for h in cluster:
        h.close()
    cluster = env.cluster(third)
    for name in NAMES[1:]:
        records = env.owner(cluster, name).records(name)
        assert [r[2] for r in records] == expected[name] + [b'{"d":"g3"}']
        seqs = [r[0] for r in records]
        assert seqs == sorted(seqs)
    for h in cluster:
        h.crash()


def test_a_zero_tail_is_kept_so_writing_goes_on_in_the_same_file(shard):
    """Only zeros after the log: nothing is cut, no new file is started after a restart."""
    shard.put("z", durable=True)
    shard.append("z", rec(b"1"))
    files, size = shard.wal_files(), os.path.getsize(last_file(shard))
    for crash in (True, False):
        shard.restart(crash=crash)
        shard.append("z", rec(b"2"))
        assert shard.wal_files() == files and os.path.getsize(last_file(shard)) == size
    assert [r[2] for r in shard.records("z")] == [b'{"d":1}', b'{"d":2}', b'{"d":2}']
