"""Checkpoints in process (spec/storage.md 1.4-1.6, 3.1, 3.2, 4; invariants 22, 23, 32, 64):
a snapshot plus the WAL tail rebuilds exactly what a full replay does, records read the same
from segments as from the WAL, absorbed WAL files go one snapshot late, topic incarnations
never share segments, segments seal by count, bytes, age and holes, shard-count changes keep
every record, idempotency keys outlive their WAL frames.

Method: ShardHarness (tests/unit/conftest.py) drives a ShardCore; env.checkpoint() (or the
Checkpoint / Checkpointer / Absorbed steps by hand) takes a checkpoint; restarts are clean
(close) or crashes (nothing more written or synced).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.protocol.messages import Absorbed, Append, Checkpoint, DeleteTopic
from topics_actors.shard.record_append import HEAD_RESERVE
from tools.testing.fault_fs import FaultFs
from topics_actors.storage.fs import RealFs
from topics_actors.storage.snapshot import (
    decode_snapshot, list_snapshots, meta_dir, read_file, snapshot_path,
)
from tools.testing.shard_harness import ShardEnv, rec

GROUP = "0001/shard-00"
PAD = b"x" * 40
VOLATILE = ("performance", "last_read_ts", "effective_priority")
_SEGMENT = re.compile(r"seg-(\d{16})\.(data|idx)")


# --- helpers (also used by test_checkpoint_faults.py) -----------------------------------------

def state(h) -> dict:
    """Every topic's GetTopic state (read-side fields left out) and all its records."""
    out = {}
    for name in sorted(h.core.registry.topics):
        info = {k: v for k, v in h.get(name).items() if k not in VOLATILE}
        out[name] = (info, h.records(name))
    return out


def logged(st: dict) -> dict:
    """`st` without ephemeral topics, whose records never outlive the process."""
    return {n: v for n, v in st.items() if v[0]["config"]["durability"] != "ephemeral"}


def seg_files(data_dir: str) -> dict[str, dict[int, tuple[int | None, int | None]]]:
    """"topics/<dir>" -> first seq -> (.data size, .idx size), None for a missing part."""
    root, out = os.path.join(data_dir, "topics"), {}
    if not os.path.isdir(root):
        return out
    for name in sorted(os.listdir(root)):
        parts: dict[int, dict[str, int]] = {}
        for file in os.listdir(os.path.join(root, name)):
            match = _SEGMENT.fullmatch(file)
            assert match, f"stray file {name}/{file}"
            size = os.path.getsize(os.path.join(root, name, file))
            parts.setdefault(int(match.group(1)), {})[match.group(2)] = size
        out[f"topics/{name}"] = {first: (p.get("data"), p.get("idx"))
                                 for first, p in sorted(parts.items())}
    return out


def body(data_dir: str, snap_id: int) -> dict:
    return decode_snapshot(read_file(RealFs(), snapshot_path(data_dir, snap_id)))


def snapshot_ids(data_dir: str) -> list[int]:
    """Ids of the snapshot files on disk, newest first."""
    return [snap_id for snap_id, _ in list_snapshots(RealFs(), data_dir)]


def checkpoint_idx(data_dir: str, snap_id: int, group: str = GROUP) -> int:
    return body(data_dir, snap_id)["positions"][group][0]


def entry(data_dir: str, snap_id: int, name: str) -> dict:
    return next(e for e in body(data_dir, snap_id)["topics"] if e["name"] == name)


def barrier(h) -> dict:
    reply = h.call(Checkpoint())
    return {reply["group"]: (reply["idx"], reply["offset"])}


def wal_idxs(h) -> list[int]:
    return [idx for idx, _ in h.wal_files()]


def bulk(h, topic: str = "bulk", n: int = 25, label: bytes = b"") -> None:
    """n records of about 90 bytes: several WAL files at file_bytes=2048."""
    for i in range(n):
        h.append(topic, rec(b'"%s-%d-%s"' % (label, i, PAD)))


def frame_size(record: list) -> int:
    """Bytes of a segment frame: 38 + node + tag + envelope (spec 1.4)."""
    _seq, _ts, envelope, tag, node, _has_meta = record
    return 38 + len(envelope) + len((tag or "").encode()) + len((node or "").encode())


def populate(h, rnd: int) -> None:
    """Every durability class, tags, nodes, meta, idempotency keys, a config change, a topic
    deleted and created again; round 0 creates the topics."""
    if rnd == 0:
        h.put("fs", durable=True)
        h.put("dk", priority=3)
        h.put("mem", durability="memory", idempotency_window_ms=60_000)
        h.put("eph", durability="ephemeral")
        h.put("gone", durable=True)
        h.append("gone", rec(b'"soon deleted"'))
    for i in range(10):
        tag, meta = f"t{i % 3}", b'{"r":%d,"i":%d}' % (rnd, i)
        replies = h.batch(
            Append("fs", [rec(b'{"i":%d,"p":"%s"}' % (i, PAD), tag, "n1", meta)]),
            Append("dk", [rec(b'"%d"' % i), rec(b"[%d]" % i, None, "n-é")]),
            Append("mem", [rec(b"%d" % i, tag)], idempotency_key=f"k{rnd}-{i}"),
            Append("eph", [rec(b"%d" % i, tag, "n3", meta)]),
            Append("again", [rec(b'"%d.%d"' % (rnd, i))]))
        assert all(isinstance(r, dict) for r in replies), replies
    h.put("dk", priority=4 + rnd)                       # a config change: type 2 again
    h.call(DeleteTopic("again"))
    h.put("again", durable=True)
    h.append("again", rec(b'"incarnation %d"' % rnd))
    if rnd == 1:
        h.call(DeleteTopic("gone"))


def retried_keys(h) -> list:
    """Retry three idempotency keys of `populate` (rounds 0, 1, 2): each is deduped."""
    out = []
    for key in ("k0-0", "k1-5", "k2-9"):
        reply = h.call(Append("mem", [rec(b'"retry"')], idempotency_key=key,
                              return_seqs=True))
        assert reply["deduped"], key
        out.append(reply["seqs"])
    return out


# --- snapshot + tail == full replay -----------------------------------------------------------

def test_snapshot_plus_tail_equals_full_replay(env, tmp_path):
    """Invariants 22, 23: two checkpoints (the second removes WAL files), more writes, then a
    restart from the snapshot, and a full replay of every WAL byte ever written on a copy."""
    h = env.single(file_bytes=4096)
    populate(h, 0)
    h.restart(crash=True)                      # disk-class padding: holes and exact head marks
    wal: dict[str, bytes] = {}                 # every WAL file as it was before a removal
    for rnd in (1, 2):
        snap_id = env.checkpoint([h], absorb=False)
        for _, path in h.wal_files():
            with open(path, "rb") as handle:
                wal[os.path.basename(path)] = handle.read()
        h.call(Absorbed(snap_id))
        populate(h, rnd)
    assert set(wal) - {os.path.basename(p) for _, p in h.wal_files()}   # some were removed
    live = state(h)
    h.restart(crash=False)
    assert h.replay.snapshot_id == snap_id == 2
    from_snapshot = state(h)
    assert logged(from_snapshot) == logged(live)
    assert from_snapshot["eph"][0]["count"] == 0 and from_snapshot["eph"][1] == []
    assert "gone" not in from_snapshot and from_snapshot["again"][0]["head_seq"] == 1
    assert retried_keys(h) == [[1], [16], [30]]
    h.close()

    copy = str(tmp_path / "full")
    shutil.copytree(env.data_dir, copy)
    group = os.path.join(copy, "wal", "shard-00")
    for name, raw in wal.items():
        if not os.path.exists(os.path.join(group, name)):
            with open(os.path.join(group, name), "wb") as handle:
                handle.write(raw)
    shutil.rmtree(meta_dir(copy))
    full = ShardEnv(copy, FaultFs()).single()
    assert full.replay.snapshot_id == 0
    assert state(full) == from_snapshot
    assert retried_keys(full) == [[1], [16], [30]]
    full.crash()


def test_snapshot_plus_tail_equals_full_replay_without_absorbing(env):
    h = env.single(file_bytes=4096)
    populate(h, 0)
    env.checkpoint([h], absorb=False)
    populate(h, 1)
    h.restart(crash=True)
    assert h.replay.snapshot_id == 1
    from_snapshot = state(h)
    for path in os.listdir(meta_dir(env.data_dir)):
        os.remove(os.path.join(meta_dir(env.data_dir), path))
    h.restart(crash=True)
    assert h.replay.snapshot_id == 0
    assert state(h) == from_snapshot
    h.crash()


def test_absorbed_records_read_the_same_from_segments(env):
    h = env.single()
    populate(h, 0)
    before = state(h)
    env.checkpoint([h], env.checkpointer(max_events=4))
    for name in ("fs", "dk", "mem", "again"):
        topic = h.core.registry.topics[name]
        assert topic.absorbed == topic.head > 0 and len(topic.locs) == 0
        assert len(topic.seg_firsts) == (1 if name == "again" else -(-topic.count // 4))
    assert state(h) == before
    h.crash()


def test_clean_restart_after_a_checkpoint_replays_only_the_tail(env):
    h = env.single()
    populate(h, 0)
    h.restart(crash=False)
    everything = h.replay.applied
    snap_id = env.checkpoint([h])
    h.append("fs", rec(b'"tail-1"'))
    h.append("fs", rec(b'"tail-2"'))
    before = state(h)
    h.restart(crash=False)
    assert h.replay.snapshot_id == h.core.wal.snapshot_id == snap_id
    assert h.replay.applied == 2 < everything          # the two appends, nothing else
    assert logged(state(h)) == logged(before)
    h.crash()


# --- WAL files ---------------------------------------------------------------------------------

def test_absorbed_removes_own_wal_files_below_the_previous_checkpoint(env):
    h = env.single(file_bytes=2048)
    checkpoints, removed_any = [], False
    for rnd in range(4):
        bulk(h, label=b"%d" % rnd)
        before = wal_idxs(h)
        snap_id = env.checkpoint([h])
        checkpoints.append(checkpoint_idx(env.data_dir, snap_id))
        after = wal_idxs(h)
        keep_from = checkpoints[-2] if rnd else 0        # the previous snapshot's checkpoint
        assert [i for i in before if i < keep_from] == [i for i in before if i not in after]
        assert set(i for i in before if i >= keep_from) <= set(after)
        removed_any |= len(after) < len(before)
        assert snapshot_ids(env.data_dir) == [snap_id, snap_id - 1][:snap_id]
    assert removed_any and checkpoints == sorted(checkpoints) and checkpoints[0] < checkpoints[-1]
    records = h.records("bulk")
    assert len(records) == 100
    h.restart(crash=True)
    assert h.records("bulk") == records
    h.crash()


# --- topic incarnations ------------------------------------------------------------------------

def test_recreated_topic_before_a_checkpoint_gets_new_segments(env):
    h = env.single()
    cp = env.checkpointer(max_events=3)
    h.put("t", durable=True)
    h.append("t", *[rec(b'"old-%d"' % i) for i in range(7)])
    env.checkpoint([h], cp)
    (old_dir,) = seg_files(env.data_dir)
    h.call(DeleteTopic("t"))
    h.put("t", durable=True)
    h.append("t", rec(b'"new-1"'), rec(b'"new-2"'))
    h.append("never-snapshotted", *[rec(b'"%d"' % i) for i in range(7)])   # sealed twice ...
    h.call(DeleteTopic("never-snapshotted"))                               # ... then gone
    expected = [(1, b'{"d":"new-1"}'), (2, b'{"d":"new-2"}')]
    env.checkpoint([h], cp)
    dirs = seg_files(env.data_dir)
    (new_dir,) = set(dirs) - {old_dir}               # the old one stays for the fallback
    assert entry(env.data_dir, 2, "t")["dir"] == new_dir and list(dirs[new_dir]) == [1]
    assert [(r[0], r[2]) for r in h.records("t")] == expected
    env.checkpoint([h], cp)
    assert list(seg_files(env.data_dir)) == [new_dir]   # the old incarnation is swept
    assert not os.path.exists(os.path.join(env.data_dir, old_dir))
    for crash in (True, False):
        h.restart(crash=crash)
        assert [(r[0], r[2]) for r in h.records("t")] == expected
    h.crash()


def test_recreated_topic_after_the_barrier_keeps_its_own_records(env):
    """A topic deleted and created again between the barrier and Absorbed is a new
    incarnation: it must not be switched to the old incarnation's segments."""
    h = env.single()
    cp = env.checkpointer()
    h.put("t", durable=True)
    h.append("t", rec(b'"old-1"'), rec(b'"old-2"'), rec(b'"old-3"'))
    barriers = barrier(h)
    h.call(DeleteTopic("t"))
    h.put("t", durable=True)
    h.append("t", rec(b'"new-1"'))
    expected = [(1, b'{"d":"new-1"}')]
    snap_id = cp.checkpoint(barriers)
    assert entry(env.data_dir, snap_id, "t")["head"] == 3      # the old incarnation
    assert h.call(Absorbed(snap_id))["topics"] == 0
    assert h.core.registry.topics["t"].absorbed == 0
    assert [(r[0], r[2]) for r in h.records("t")] == expected
    assert h.get("t")["head_seq"] == 1 and h.get("t")["count"] == 1
    h.restart(crash=True)
    assert [(r[0], r[2]) for r in h.records("t")] == expected
    assert env.checkpoint([h], cp) == snap_id + 1
    assert h.core.registry.topics["t"].absorbed == 1
    assert [(r[0], r[2]) for r in h.records("t")] == expected
    h.append("t", rec(b'"new-2"'))
    h.restart(crash=False)
    assert [r[2] for r in h.records("t")] == [b'{"d":"new-1"}', b'{"d":"new-2"}']
    h.crash()


# --- sealing -----------------------------------------------------------------------------------

def test_max_events_seals_segments_and_reads_cross_their_boundaries(env):
    h = env.single()
    h.put("f", durable=True)
    for i in range(1, 24):
        h.append("f", rec(b'"%d"' % i, "tg" if i % 2 else None, "nd" if i % 3 == 0 else None,
                          b'{"m":%d}' % i if i % 4 == 0 else None))
    records = h.records("f")
    cp = env.checkpointer(max_events=5)
    env.checkpoint([h], cp)
    ((directory, segments),) = seg_files(env.data_dir).items()
    assert list(segments) == [1, 6, 11, 16, 21]
    for first, (data_size, idx_size) in segments.items():
        count = min(5, 24 - first)
        assert idx_size == 20 * count
        assert data_size == sum(map(frame_size, records[first - 1:first - 1 + count]))
    assert h.core.registry.topics["f"].seg_firsts == [1, 6, 11, 16, 21]
    for start in (0, 4, 5, 6, 9, 10, 20, 22):
        assert h.records("f", start) == records[start:]
    for i in range(24, 28):                            # the open segment 21 fills up, then 26
        h.append("f", rec(b'"%d"' % i))
    records = h.records("f")
    env.checkpoint([h], cp)
    assert list(seg_files(env.data_dir)[directory]) == [1, 6, 11, 16, 21, 26]
    assert seg_files(env.data_dir)[directory][26][1] == 2 * 20
    for crash in (False, True):
        h.restart(crash=crash)
        assert h.records("f") == records
        assert h.records("f", 23) == records[23:]
    h.crash()


def test_max_bytes_seals_segments(env):
    h = env.single()
    for i in range(30):
        h.append("b", rec(b'"%d-%s"' % (i, PAD)))
    records = h.records("b")
    env.checkpoint([h], env.checkpointer(max_bytes=300))
    ((_, segments),) = seg_files(env.data_dir).items()
    firsts = list(segments)
    assert len(firsts) > 3
    for first, following in zip(firsts, firsts[1:]):
        sizes = list(map(frame_size, records[first - 1:following - 1]))
        assert segments[first] == (sum(sizes), 20 * len(sizes))
        assert sum(sizes[:-1]) < 300 <= sum(sizes)       # sealed before the record past 300
    assert h.records("b") == records
    h.crash()


def test_head_padding_holes_start_a_new_segment(env):
    h = env.single()
    h.put("d")                                       # disk class: a reservation of 256
    for i in range(1, 4):
        h.append("d", rec(b'"%d"' % i))
    h.restart(crash=True)                            # pads the head to the reservation
    padded = 1 + HEAD_RESERVE
    assert h.get("d")["head_seq"] == padded
    h.append("d", rec(b'"after"'), rec(b'"after-2"'))
    records = h.records("d")
    assert [r[0] for r in records] == [1, 2, 3, padded + 1, padded + 2]
    env.checkpoint([h])
    ((_, segments),) = seg_files(env.data_dir).items()
    assert segments == {1: (sum(map(frame_size, records[:3])), 60),
                        padded + 1: (sum(map(frame_size, records[3:])), 40)}
    for start in (0, 2, 3, 100, padded, padded + 1):
        assert h.records("d", start) == [r for r in records if r[0] > start]
    assert h.get("d")["head_seq"] == padded + 2 and h.get("d")["count"] == 5
    h.restart(crash=False)
    assert h.records("d") == records and h.get("d")["head_seq"] == padded + 2
    h.crash()


def test_max_age_seals_by_record_time(env):
    now = [1_000]
    h = env.single(clock=lambda: now[0])
    cp = Checkpointer(env.fs, env.data_dir, SegmentLimits(max_age_ms=5_000),
                      clock=lambda: now[0])
    for ts in (1_000, 3_000, 5_999, 6_000, 7_000, 10_999, 12_000):
        now[0] = ts
        h.append("a", rec(b"%d" % ts))
    env.checkpoint([h], cp)
    ((directory, segments),) = seg_files(env.data_dir).items()
    assert {first: idx // 20 for first, (_, idx) in segments.items()} == {1: 3, 4: 3, 7: 1}
    assert body(env.data_dir, 1)["topics"][0]["open"]        # 7 is young: still open
    now[0] = 17_000                                          # an idle open segment ages out
    env.checkpoint([h], cp)
    assert not body(env.data_dir, 2)["topics"][0]["open"]
    h.append("a", rec(b"17000"))
    env.checkpoint([h], cp)
    assert list(seg_files(env.data_dir)[directory]) == [1, 4, 7, 8]
    assert [r[1] for r in h.records("a")] == [1_000, 3_000, 5_999, 6_000, 7_000, 10_999,
                                              12_000, 17_000]
    h.crash()
    cp.close()


# --- idempotency -------------------------------------------------------------------------------

@pytest.mark.parametrize("durability", ["fsync", "disk", "memory"])
def test_idempotency_key_outlives_its_wal_frame(env, durability):
    """Invariant 64: the key's IdemKey frame is pruned with its WAL file; the snapshot keeps
    the key, so a retry after a restart is deduped with the original seqs."""
    h = env.single(file_bytes=2048)
    h.put("k", durability=durability)
    msg = Append("k", [rec(b'"a"'), rec(b'"b"')], idempotency_key="order-1", return_seqs=True)
    first = h.call(msg)
    assert first["seqs"] == [1, 2] and not first["deduped"]
    records = h.records("k")
    key_file = wal_idxs(h)[0]
    for rnd in range(3):
        bulk(h, label=b"%d" % rnd)
        env.checkpoint([h])
    assert key_file not in wal_idxs(h)
    for crash in (True, False):
        h.restart(crash=crash)
        retry = h.call(msg)
        assert retry["deduped"] and retry["seqs"] == [1, 2] and retry["first_seq"] == 1
        assert h.records("k") == records
    h.crash()


# --- shard-count changes ----------------------------------------------------------------------

NAMES = [f"topic-{i}" for i in range(10)]


def _fill(env, cluster, label: bytes, expected: dict) -> None:
    for i, name in enumerate(NAMES):
        h = env.owner(cluster, name)
        if name not in expected:
            h.put(name, durability=("fsync", "disk", "memory")[i % 3])
        for j in range(3):
            h.append(name, rec(b'"%s-%d"' % (label, j), f"t{j}", None, b"[%d]" % j))
        expected[name] = h.records(name)


def _check(env, cluster, expected: dict) -> None:
    for name, records in expected.items():
        owner = env.owner(cluster, name)
        assert not any(h.exists(name) for h in cluster if h is not owner)
        assert owner.records(name) == records, name


@pytest.mark.parametrize("counts", [(1, 3), (3, 2)])
def test_shard_count_change_with_checkpoints(env, counts):
    """Invariant 32: a checkpoint over the new shards absorbs the retired groups; once both
    kept snapshots have them, remove_retired deletes them and nothing is lost."""
    first, second = counts
    cluster, expected = env.cluster(first), {}
    _fill(env, cluster, b"a", expected)
    env.checkpoint(cluster)
    _fill(env, cluster, b"b", expected)                # a tail after the checkpoint
    for h in cluster:
        h.close()
    cluster = env.cluster(second)
    wal_root = os.path.join(env.data_dir, "wal")
    assert "retired-0001" in os.listdir(wal_root)
    _check(env, cluster, expected)
    cp = env.checkpointer()
    snap_id = env.checkpoint(cluster, cp)
    retired = [f"0001/shard-{s:02d}" for s in range(first)]
    assert sorted(body(env.data_dir, snap_id)["retired_done"]) == retired
    assert {f"0002/shard-{s:02d}" for s in range(second)} <= set(
        body(env.data_dir, snap_id)["positions"])
    _check(env, cluster, expected)
    assert cp.remove_retired() == 0                    # the previous snapshot still needs them
    _fill(env, cluster, b"c", expected)
    env.checkpoint(cluster, cp)
    _check(env, cluster, expected)
    assert cp.remove_retired() == first
    assert sorted(os.listdir(wal_root)) == ["LAYOUT"] + [f"shard-{s:02d}" for s in range(second)]
    for h in cluster:
        h.restart(crash=True)
    _check(env, cluster, expected)
    env.checkpoint(cluster, cp)
    for h in cluster:
        h.restart(crash=False)
    _check(env, cluster, expected)
    for h in cluster:
        h.crash()
    cp.close()


# --- nothing new -------------------------------------------------------------------------------

def _segment_bytes(data_dir: str) -> dict[str, bytes]:
    out = {}
    for directory, segments in seg_files(data_dir).items():
        for name in sorted(os.listdir(os.path.join(data_dir, directory))):
            with open(os.path.join(data_dir, directory, name), "rb") as handle:
                out[f"{directory}/{name}"] = handle.read()
        assert segments
    return out


def test_checkpoints_with_nothing_new_change_nothing(env):
    h = env.single()
    populate(h, 0)
    cp = env.checkpointer(max_events=4)
    first = env.checkpoint([h], cp)
    files, before = _segment_bytes(env.data_dir), state(h)
    topics = body(env.data_dir, first)["topics"]
    for snap_id in (first + 1, first + 2):
        assert env.checkpoint([h], cp) == snap_id
        assert snapshot_ids(env.data_dir) == [snap_id, snap_id - 1]
        assert body(env.data_dir, snap_id)["topics"] == topics
        assert _segment_bytes(env.data_dir) == files
        assert state(h) == before
    fresh = env.checkpointer(max_events=4)                   # a restarted compactor too
    assert env.checkpoint([h], fresh) == first + 3
    assert _segment_bytes(env.data_dir) == files and state(h) == before
    h.restart(crash=False)
    assert logged(state(h)) == logged(before)
    h.crash()


# --- regressions -------------------------------------------------------------------------------

def test_checkpoint_keeps_records_of_an_ephemeral_past_readable(env):
    """TopicState.absorb used to drop the RAM locations of records written while the topic
    was ephemeral (in no segment): after a checkpoint they read as holes, count said 4."""
    h = env.single()
    h.put("e", durability="ephemeral")
    h.append("e", rec(b"1"), rec(b"2"), rec(b"3"))
    h.put("e", durability="disk")
    h.append("e", rec(b"4"))
    before = state(h)
    assert [r[0] for r in before["e"][1]] == [1, 2, 3, 4]
    env.checkpoint([h])
    assert state(h) == before
    h.append("e", rec(b"5"))
    env.checkpoint([h])
    assert [r[0] for r in h.records("e")] == [1, 2, 3, 4, 5] and h.get("e")["count"] == 5
    h.restart(crash=False)                         # ephemeral records end with the process
    assert [r[0] for r in h.records("e")] == [4, 5] and h.get("e")["head_seq"] == 5
    h.crash()


def test_a_shard_unmaps_segments_no_snapshot_lists(env):
    """A dropped segment (below a cap's floor) or a deleted topic's stays mapped by no
    shard once it has taken in the snapshot that no longer lists it: the map would keep
    the unlinked file's pages and a descriptor."""
    h = env.single()
    h.put("f", durable=True, cap_records=10)
    h.put("gone", durable=True)
    cp = env.checkpointer(max_events=5)
    for i in range(1, 11):
        h.append("f", rec(b'"%d"' % i))
        h.append("gone", rec(b'"%d"' % i))
    env.checkpoint([h], cp)
    h.records("f")
    h.records("gone")
    mapped = h.core.reader.segments._views
    assert {first for (_d, first) in mapped} == {1, 6} and len(mapped) == 4
    for i in range(11, 21):
        h.append("f", rec(b'"%d"' % i))
    h.call(DeleteTopic("gone"))
    env.checkpoint([h], cp)
    topic = h.core.registry.topics["f"]
    assert set(mapped) <= {(topic.seg_dir, first) for first in topic.seg_firsts}
    assert not any(first in (1, 6) for (_d, first) in mapped)
    assert [r[2] for r in h.records("f")] == [b'{"d":"%d"}' % i for i in range(11, 21)]
    h.crash()
