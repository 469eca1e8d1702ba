"""WAL layout: shard-NN groups, LAYOUT, retiring groups when the shard count changes."""

from __future__ import annotations

import os

import orjson
import pytest

from tools.testing.fault_fs import FaultFs
from topics_actors.storage.wal_layout import (
    group_dir, list_wal_files, prepare_layout, read_layout, replay_groups, wal_file_name,
    wal_root,
)


def tree(data_dir: str) -> list[str]:
    root = wal_root(data_dir)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out += [os.path.normpath(os.path.join(rel, d)) for d in dirnames]
        out += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
    return sorted(out)


def read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def put_file(data_dir: str, shard: int, idx: int, content: bytes = b"x") -> str:
    path = os.path.join(group_dir(data_dir, shard), wal_file_name(idx))
    with open(path, "wb") as handle:
        handle.write(content)
    return path


@pytest.fixture
def fs():
    return FaultFs()


def test_first_run_creates_groups_and_layout(fs, data_dir):
    assert prepare_layout(fs, data_dir, 3) == 1
    assert read_layout(fs, data_dir) == {"shards": 3, "generation": 1}
    assert tree(data_dir) == ["LAYOUT", "shard-00", "shard-01", "shard-02"]
    assert fs.count("rename") == 1 and fs.count("sync_all") == 1   # LAYOUT.tmp -> LAYOUT


def test_same_count_is_a_no_op(fs, data_dir):
    prepare_layout(fs, data_dir, 2)
    put_file(data_dir, 1, 1, b"frames")
    before = (fs.count("rename"), fs.count("open"), tree(data_dir))
    assert prepare_layout(fs, data_dir, 2) == 1
    assert (fs.count("rename"), fs.count("open"), tree(data_dir)) == before


def test_count_change_retires_every_group(fs, data_dir):
    prepare_layout(fs, data_dir, 3)
    put_file(data_dir, 0, 1, b"a")
    put_file(data_dir, 2, 1, b"c")
    assert prepare_layout(fs, data_dir, 2) == 2
    assert read_layout(fs, data_dir) == {"shards": 2, "generation": 2}
    assert tree(data_dir) == [
        "LAYOUT", "retired-0001", "retired-0001/shard-00",
        "retired-0001/shard-00/wal-0000000000000001.log", "retired-0001/shard-01",
        "retired-0001/shard-02", "retired-0001/shard-02/wal-0000000000000001.log",
        "shard-00", "shard-01"]
    # the new groups are empty: a group dir only ever holds one layout's frames
    assert list_wal_files(fs, group_dir(data_dir, 0)) == []


def test_generations_are_never_reused(fs, data_dir):
    prepare_layout(fs, data_dir, 1)
    assert prepare_layout(fs, data_dir, 4) == 2
    assert prepare_layout(fs, data_dir, 2) == 3
    assert prepare_layout(fs, data_dir, 2) == 3
    names = sorted(n for n in os.listdir(wal_root(data_dir)) if n.startswith("retired"))
    assert names == ["retired-0001", "retired-0002"]
    assert sorted(os.listdir(os.path.join(wal_root(data_dir), "retired-0002"))) == [
        "shard-00", "shard-01", "shard-02", "shard-03"]


def test_interrupted_retire_is_finished_by_the_next_call(fs, data_dir):
    """A crash after moving some groups but before LAYOUT is rewritten."""
    prepare_layout(fs, data_dir, 3)
    files = {s: put_file(data_dir, s, 1, b"s%d" % s) for s in range(3)}
    root = wal_root(data_dir)
    os.makedirs(os.path.join(root, "retired-0001"))
    os.rename(group_dir(data_dir, 0), os.path.join(root, "retired-0001", "shard-00"))
    assert read_layout(fs, data_dir) == {"shards": 3, "generation": 1}

    generation = prepare_layout(fs, data_dir, 2)
    assert read_layout(fs, data_dir) == {"shards": 2, "generation": generation}
    current = sorted(n for n in os.listdir(root) if n.startswith("shard-"))
    assert current == ["shard-00", "shard-01"]
    for s in range(2):
        assert list_wal_files(fs, group_dir(data_dir, s)) == []
    # every old group is reachable from every new shard, in a retired directory
    for s in range(2):
        groups = replay_groups(fs, data_dir, s)
        old = [d for key, d in groups if os.sep + "retired-" in d]
        contents = sorted(read(p) for d in old for _, p in list_wal_files(fs, d))
        assert contents == [b"s0", b"s1", b"s2"]
        assert groups[-1] == (f"{generation:04d}/shard-{s:02d}", group_dir(data_dir, s))
    assert not any(os.path.exists(p) for p in files.values())
    # and a third call changes nothing
    snapshot = tree(data_dir)
    assert prepare_layout(fs, data_dir, 2) == generation and tree(data_dir) == snapshot


def test_retire_failing_midway_is_finished_by_the_next_call(fs, data_dir):
    prepare_layout(fs, data_dir, 3)
    for s in range(3):
        put_file(data_dir, s, 1, b"s%d" % s)
    fs.fail("rename", at=fs.count("rename") + 1)       # the second group's move fails
    with pytest.raises(OSError):
        prepare_layout(fs, data_dir, 5)
    assert read_layout(fs, data_dir) == {"shards": 3, "generation": 1}
    generation = prepare_layout(fs, data_dir, 5)
    assert read_layout(fs, data_dir)["shards"] == 5
    groups = replay_groups(fs, data_dir, 4)
    old = sorted(read(p) for key, d in groups[:-1]
                 for _, p in list_wal_files(fs, d))
    assert old == [b"s0", b"s1", b"s2"]
    assert generation == 2 and len(groups) == 4
    # the group that failed to move went to the same retired directory as the others
    assert [key for key, _ in groups] == ["0001/shard-00", "0001/shard-01", "0001/shard-02",
                                          "0002/shard-04"]


def test_layout_write_failure_leaves_the_old_layout(fs, data_dir):
    prepare_layout(fs, data_dir, 2)
    fs.fail("sync_all")
    with pytest.raises(OSError):
        prepare_layout(fs, data_dir, 3)
    assert read_layout(fs, data_dir) == {"shards": 2, "generation": 1}
    generation = prepare_layout(fs, data_dir, 3)
    assert generation > 1
    assert read_layout(fs, data_dir) == {"shards": 3, "generation": generation}
    assert [key for key, _ in replay_groups(fs, data_dir, 2)] == [
        "0001/shard-00", "0001/shard-01", "0002/shard-02"]


def test_layout_file_is_json(fs, data_dir):
    prepare_layout(fs, data_dir, 8)
    with open(os.path.join(wal_root(data_dir), "LAYOUT"), "rb") as handle:
        assert orjson.loads(handle.read()) == {"shards": 8, "generation": 1}
    assert not os.path.exists(os.path.join(wal_root(data_dir), "LAYOUT.tmp"))


def test_replay_groups_order(fs, data_dir):
    assert replay_groups(fs, data_dir, 0) == [("0001/shard-00", group_dir(data_dir, 0))]
    prepare_layout(fs, data_dir, 2)
    prepare_layout(fs, data_dir, 3)
    prepare_layout(fs, data_dir, 1)
    root = wal_root(data_dir)
    keys = [key for key, _ in replay_groups(fs, data_dir, 0)]
    assert keys == ["0001/shard-00", "0001/shard-01",
                    "0002/shard-00", "0002/shard-01", "0002/shard-02",
                    "0003/shard-00"]
    dirs = [d for _, d in replay_groups(fs, data_dir, 0)]
    assert dirs[0] == os.path.join(root, "retired-0001", "shard-00")
    assert dirs[-1] == group_dir(data_dir, 0)


def test_list_wal_files_sorted_by_idx_and_ignores_others(fs, data_dir):
    prepare_layout(fs, data_dir, 1)
    for idx in (10, 2, 1):
        put_file(data_dir, 0, idx)
    directory = group_dir(data_dir, 0)
    for stray in ("wal-0000000000000003.log.pre", "wal-1.log", "notes.txt"):
        open(os.path.join(directory, stray), "wb").close()
    assert [idx for idx, _ in list_wal_files(fs, directory)] == [1, 2, 10]
    assert list_wal_files(fs, os.path.join(directory, "missing")) == []
