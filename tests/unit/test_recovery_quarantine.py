"""Recovery quarantine: damage injected mid-log in a WAL, in a sealed segment's .data and .idx
and at the tail, under each TOPICS_RECOVERY_ON_MISMATCH policy; the repair; and the
quarantined topic's neighbour, which keeps serving with nothing lost.

Each case writes two interleaved topics ("a", the victim, and "n", its neighbour), damages
the files of the stopped shard, starts it, and checks what it serves, what it reports, what
a restart does and what the repair leaves, against the records written before the damage.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tools.testing.shard_harness import rec
from topics_actors import fsck
from topics_actors.config import ShardOptions
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.shard.shard_core import ShardCore
from topics_actors.protocol.messages import Append, Checkpoint, DeleteTopic, Diff, RepairTopic
from topics_actors.storage import failpoint, frame_body
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.segment import IDX_ENTRY, data_path, idx_path
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_identity import topic_id

pytestmark = pytest.mark.timeout(60)

RECORDS = 12


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0xFF]))


def write_pair(h, count: int = RECORDS) -> None:
    h.put("a", durable=True)
    h.put("n", durable=True)
    for i in range(1, count + 1):
        h.batch(h_append("a", i), h_append("n", i))


def h_append(topic: str, i: int) -> Append:
    return Append(topic, [rec(b'"%s-%d"' % (topic.encode(), i))])


def frames(h, path: str) -> list:
    scan = FileScan(h.fs, path)
    try:
        return list(scan.frames())
    finally:
        scan.close()


def appends_of(h, topic: str) -> list:
    """(path, frame) of every Append frame of `topic`, in log order."""
    tid = topic_id(topic)
    return [(path, f) for _, path in h.wal_files() for f in frames(h, path)
            if f.type == FrameType.APPEND and f.topic_id == tid]


def code_of(call) -> ErrorCode:
    with pytest.raises(TopicsError) as error:
        call()
    return error.value.code


def only_quarantine(h) -> dict:
    [found] = h.core.quarantine.status()["quarantine"]
    return found


def neighbour_intact(h, expected: list) -> None:
    assert h.records("n") == expected
    assert h.append("n")["first_seq"] == len(expected) + 1
    expected.append(h.records("n", len(expected))[0])


# --- WAL: damage inside the log ------------------------------------------------------------------

def damage_mid_wal(env, policy: str, seq: int = 5):
    """Flip the seq field of "a"'s Append `seq` (its checksum fails, its header adds up)."""
    h = env.single()
    write_pair(h)
    before = {"a": h.records("a"), "n": h.records("n")}
    h.close()
    path, victim = appends_of(h, "a")[seq - 1]
    flip(path, victim.offset + 20)
    h.policy = policy
    h.start()
    return h, before


@pytest.mark.parametrize("policy", ["park", "refuse"])
def test_mid_wal_damage_quarantines_only_its_topic(env, policy):
    h, before = damage_mid_wal(env, policy)
    for call in (lambda: h.records("a"), lambda: h.append("a"), lambda: h.get("a")):
        assert code_of(call) is ErrorCode.QUARANTINED
    found = only_quarantine(h)
    assert (found["topic"], found["first_bad_seq"]) == ("a", 5)
    assert found["would_lose"] == {"records": RECORDS - 4, "more_unknown": False}
    assert found["where"].startswith("wal/shard-00/") and found["repairable"]
    assert h.core.quarantine.status()["recovery_policy"] == policy
    neighbour = before["n"]
    neighbour_intact(h, neighbour)                  # every record, and it takes writes
    assert code_of(lambda: h.call(Checkpoint())) is ErrorCode.QUARANTINED
    h.restart(crash=True)                           # never healed silently
    assert only_quarantine(h)["first_bad_seq"] == 5
    assert h.records("n") == neighbour
    report = fsck.check(env.data_dir)               # fsck finds the same
    assert [(q["topic"], q["first_bad_seq"], q["would_lose"]["records"])
            for q in report.quarantine] == [("a", 5, RECORDS - 4)]
    repaired = h.call(RepairTopic("a"))
    assert (repaired["lost_records"], repaired["first_bad_seq"]) == (RECORDS - 4, 5)
    assert h.records("a") == before["a"][:4]
    assert h.append("a")["first_seq"] == 5
    kept = h.records("a")
    h.call(Checkpoint())                            # checkpoints go on after the repair
    h.restart(crash=True)
    assert not h.core.quarantine.topics
    assert h.records("a") == kept and h.records("n") == neighbour
    assert fsck.check(env.data_dir).quarantine == []
    h.crash()


def test_mid_wal_damage_under_ignore_is_cut_with_a_warning(env, caplog):
    h, before = damage_mid_wal(env, "ignore")
    assert not h.core.quarantine.topics and h.core.quarantine.total == 1
    assert "event=recovery_truncated" in caplog.text
    assert h.records("a") == before["a"][:4]
    assert h.records("n") == before["n"]
    h.restart(crash=True)
    assert h.core.quarantine.total == 0
    assert h.records("a") == before["a"][:4] and h.records("n") == before["n"]
    h.crash()


@pytest.mark.parametrize("damage", ["frame_len", "zeroed_sector"])
def test_unattributable_wal_damage_quarantines_every_topic_it_may_concern(env, damage):
    """A damaged length field, or a zeroed sector: the damaged bytes cannot be told apart,
    so every topic known there is quarantined; the scan goes on at the next valid frame (a
    run of zeros inside the log is not its end)."""
    h = env.single()
    write_pair(h)
    before = {"a": h.records("a"), "n": h.records("n")}
    h.close()
    path, victim = appends_of(h, "a")[4]
    patch(path, victim.offset, (7).to_bytes(4, "little") if damage == "frame_len"
          else bytes(512))
    h.start()
    found = {q["topic"]: q for q in h.core.quarantine.status()["quarantine"]}
    assert sorted(found) == ["a", "n"]
    assert found["a"]["first_bad_seq"] == 5 and found["n"]["first_bad_seq"] == 5
    assert found["a"]["would_lose"]["more_unknown"]
    for name in ("a", "n"):
        h.call(RepairTopic(name))
        assert h.records(name) == before[name][:4]
    h.restart(crash=True)
    assert not h.core.quarantine.topics
    assert h.records("a") == before["a"][:4] and h.records("n") == before["n"][:4]
    h.crash()


# --- WAL: gaps and dangling references --------------------------------------------------------

def test_lease_of_a_seq_without_a_durable_record_quarantines_the_queue(env):
    h = env.single()
    h.put("q", type="queue", durable=True)
    h.put("n", durable=True)
    h.append("q", rec(b'"job"'))
    h.append("n", rec(b'"x"'))
    h.close()
    path = h.wal_files()[-1][1]
    end = frames(h, path)[-1]
    forged = bytearray()
    body = frame_body.encode_lease(frame_body.LeaseBody(3, 1, 0, 1, "w"))   # ACKED seq 9
    encode(forged, FrameType.LEASE, 0, topic_id("q"), 9, 1, body)
    patch(path, end.offset + end.size, bytes(forged))
    h.start()
    found = only_quarantine(h)
    assert found["topic"] == "q" and "lease frame of seq 9" in found["reason"]
    assert found["would_lose"]["records"] == 0
    assert [r[0] for r in h.records("n")] == [1]
    h.call(RepairTopic("q"))
    assert [r[0] for r in h.records("q")] == [1]
    h.restart(crash=True)
    assert not h.core.quarantine.topics
    h.crash()


# --- WAL: the tail ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["park", "refuse", "ignore"])
def test_torn_tail_is_cut_under_every_policy(env, policy):
    """Damage with no valid frame after it is a lost tail, never acked: cut, no quarantine."""
    h = env.single()
    write_pair(h)
    before = {"a": h.records("a"), "n": h.records("n")}
    h.close()
    path, last = appends_of(h, "n")[-1]
    flip(path, last.offset + last.size - 3)          # the last frame's checksum
    h.policy = policy
    h.start()
    assert h.core.quarantine.total == 0 and h.replay.audit.tails
    assert h.records("a") == before["a"] and h.records("n") == before["n"][:-1]
    assert h.append("n")["first_seq"] == RECORDS
    h.restart(crash=True)
    assert h.core.quarantine.total == 0
    h.crash()


def test_a_lost_page_in_the_unsynced_tail_is_cut_not_quarantined(env):
    """A machine crash after the kernel wrote back a later page of the WAL's unsynced tail
    but not an earlier one (found with LazyFS, issue 34): only memory-class records follow
    the zeroed page, none of them synced, so recovery cuts the tail there as a torn one;
    the topic keeps what came before and takes writes at head + 1."""
    h = env.single()
    h.put("m", durability="memory")
    for i in range(1, 121):
        h.batch(Append("m", [rec(b'"m-%d-%s"' % (i, b"x" * 60))]))
    before = h.records("m")
    h.crash()
    frames_m = appends_of(h, "m")
    path, victim = frames_m[20]
    page = (victim.offset // 4096 + 1) * 4096
    patch(path, page, bytes(4096))
    h.start()
    assert h.core.quarantine.total == 0 and h.replay.audit.tails
    kept = h.records("m")
    assert kept == before[:len(kept)] and 20 <= len(kept) < len(before)
    assert h.append("m")["first_seq"] == len(kept) + 1
    h.crash()


# --- segments ---------------------------------------------------------------------------------

def sealed(env):
    """Both topics absorbed into segments of 4 records; returns the harness, the records,
    and the .data and .idx paths of "a"'s segment holding seqs 5..8."""
    h = env.single()
    write_pair(h)
    before = {"a": h.records("a"), "n": h.records("n")}
    env.checkpoint([h], env.checkpointer(max_events=4))
    seg_dir = h.core.registry.topics["a"].seg_dir
    assert h.core.registry.topics["a"].seg_firsts == [1, 5, 9]
    return h, before, data_path(seg_dir, 5), idx_path(seg_dir, 5)


def idx_entry(path: str, seq: int) -> tuple:
    with open(path, "rb") as handle:
        return IDX_ENTRY.unpack_from(handle.read(), (seq - 5) * 20)


@pytest.mark.parametrize("policy", ["park", "refuse", "ignore"])
def test_damaged_segment_record(env, policy, caplog):
    h, before, data, idx = sealed(env)
    offset, length, _, _ = idx_entry(idx, 6)
    flip(data, offset + length - 12)                # inside the envelope of seq 6
    h.policy = policy
    h.restart(crash=False)
    kept = before["a"][:5] + before["a"][6:]        # a repair makes seq 6 a deleted record
    if policy == "ignore":
        assert not h.core.quarantine.topics and "event=recovery_truncated" in caplog.text
    else:
        assert code_of(lambda: h.records("a")) is ErrorCode.QUARANTINED
        found = only_quarantine(h)
        assert (found["first_bad_seq"], found["would_lose"]["records"]) == (6, 1)
        assert found["where"].endswith(f"seg-0000000000000005.data@{offset}")
        assert h.records("n") == before["n"]
        h.call(RepairTopic("a"))
    assert h.records("a") == kept and h.records("n") == before["n"]
    h.restart(crash=True)
    assert not h.core.quarantine.topics
    assert h.records("a") == kept
    assert fsck.check(env.data_dir).ok
    h.crash()


def test_idx_entry_past_the_data_is_repaired_from_the_data(env):
    """An .idx entry that points past the durable .data: the frame is whole, so the repair
    rewrites the entry and loses nothing."""
    h, before, data, idx = sealed(env)
    offset, length, ts, flags = idx_entry(idx, 7)
    patch(idx, 2 * 20, IDX_ENTRY.pack(offset + 1_000_000, length, ts, flags))
    h.restart(crash=False)
    found = only_quarantine(h)
    assert found["first_bad_seq"] == 7 and found["would_lose"]["records"] == 0
    assert h.records("n") == before["n"]
    assert h.call(RepairTopic("a"))["lost_records"] == 0
    assert h.records("a") == before["a"]
    h.restart(crash=True)
    assert not h.core.quarantine.topics and h.records("a") == before["a"]
    h.crash()


def test_unlocatable_segment_record_has_no_automatic_repair(env):
    """Both the .idx entry and the frame's length are gone: the repair refuses (nothing is
    written) and the topic stays quarantined; its neighbour serves."""
    h, before, data, idx = sealed(env)
    offset, length, ts, flags = idx_entry(idx, 6)
    patch(idx, 20, IDX_ENTRY.pack(offset + 1_000_000, length, ts, flags))
    patch(data, offset, (1).to_bytes(4, "little"))
    h.restart(crash=False)
    assert not only_quarantine(h)["repairable"]
    raw = (pathlib.Path(data).read_bytes(), pathlib.Path(idx).read_bytes())
    assert code_of(lambda: h.call(RepairTopic("a"))) is ErrorCode.INTERNAL
    assert (pathlib.Path(data).read_bytes(), pathlib.Path(idx).read_bytes()) == raw
    assert "a" in h.core.quarantine.topics
    assert h.records("n") == before["n"]
    h.crash()


def test_repair_of_a_topic_that_is_not_quarantined_is_not_found(shard):
    shard.put("a")
    assert code_of(lambda: shard.call(RepairTopic("a"))) is ErrorCode.NOT_FOUND
    assert shard.call(Diff("a", 0))["records"] == []


def test_a_topic_deleted_after_its_segment_damage_is_not_quarantined(env):
    h, before, data, idx = sealed(env)
    offset, length, _, _ = idx_entry(idx, 6)
    flip(data, offset + length - 12)
    h.call(DeleteTopic("a"))                         # logged after the snapshot
    h.restart(crash=True)
    assert h.core.quarantine.total == 0 and not h.exists("a")
    h.put("a")                                       # the name starts clean
    assert h.append("a")["first_seq"] == 1
    assert h.records("n") == before["n"]
    h.crash()


@pytest.mark.parametrize("where", ["wal", "segment"])
def test_a_crash_in_the_middle_of_a_repair_converges(env, where):
    """A repair dies after writing its fixes, before syncing them (the page cache keeps
    them, or not: both outcomes are a restart's to see). The next start quarantines the
    topic again or finds it repaired; a second repair finishes; nothing else changes."""
    if where == "wal":
        h, before = damage_mid_wal(env, "park")
        kept = before["a"][:4]
    else:
        h, before, data, idx = sealed(env)
        offset, length, _, _ = idx_entry(idx, 6)
        flip(data, offset + length - 12)
        h.restart(crash=False)
        kept = before["a"][:5] + before["a"][6:]
    failpoint.arm("repair::before_sync=abort@1")
    try:
        with pytest.raises(failpoint.Abort):
            h.call(RepairTopic("a"))
    finally:
        failpoint.disarm()
    h.restart(crash=True)
    if "a" in h.core.quarantine.topics:
        h.call(RepairTopic("a"))
    assert h.records("a") == kept and h.records("n") == before["n"]
    h.restart(crash=True)
    assert not h.core.quarantine.topics and h.records("a") == kept
    h.crash()


def test_segments_are_checked_in_slices_after_replay(env):
    """Replay only queues the segments; the check runs in budgeted slices (the shell's idle
    turns) and skips a segment its topic no longer lists."""
    h, before, data, idx = sealed(env)
    offset, length, _, _ = idx_entry(idx, 6)
    flip(data, offset + length - 12)
    h.close()
    h.core = core = ShardCore(h.fs, ShardOptions(env.data_dir, 0, 1, background_prealloc=False))
    list(core.replay().run())
    queued = len(core.quarantine.unaudited)
    assert queued == 6 and not core.quarantine.topics      # 3 segments of each topic
    core.audit_segments(0.0)                                # no time: nothing checked
    assert len(core.quarantine.unaudited) == queued
    core.quarantine.queue_segments(topic_id("gone"), [[1, 4, 100]], "nowhere")
    core.audit_segments(None)
    assert not core.quarantine.unaudited
    assert list(core.quarantine.topics) == ["a"]            # "gone" was skipped
    assert core.status()["segments_unaudited"] == 0
    h.core = core
    assert h.records("n") == before["n"]
    h.crash()


def test_a_missing_segment_has_no_automatic_repair(env):
    h, before, data, idx = sealed(env)
    os.remove(idx)
    h.restart(crash=False)
    found = only_quarantine(h)
    assert (found["first_bad_seq"], found["repairable"]) == (5, False)
    assert found["reason"] == "segment is missing" and found["would_lose"]["records"] == 4
    assert code_of(lambda: h.call(RepairTopic("a"))) is ErrorCode.INTERNAL
    assert "a" in h.core.quarantine.topics and h.records("n") == before["n"]
    h.crash()


def test_an_io_error_in_an_ignore_repair_keeps_the_quarantine(env, caplog):
    h = env.single()
    write_pair(h)
    before = {"a": h.records("a"), "n": h.records("n")}
    h.close()
    path, victim = appends_of(h, "a")[4]
    flip(path, victim.offset + 20)
    h.policy = "ignore"
    h.fs.fail("sync_data")                      # the repair's sync, the first of the start
    h.start()
    assert h.fs.fired and "event=quarantine_kept" in caplog.text
    assert "a" in h.core.quarantine.topics
    assert h.records("n") == before["n"]
    h.call(RepairTopic("a"))                    # the device works again: an admin repairs
    assert h.records("a") == before["a"][:4]
    h.restart(crash=True)
    assert not h.core.quarantine.topics and h.records("a") == before["a"][:4]
    h.crash()
