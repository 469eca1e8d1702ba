"""topics fsck (topics_actors/fsck/, `topics fsck`): real data dirs built in-process by the
shard harness and the checkpointer, then damaged byte by byte; every problem must name its
file and offset, the exit code must follow the worst severity, and the check must never
change a byte of the dir."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

import topics_actors

from supervisor import cli
from topics_actors import fsck, progress_meter
from topics_actors.record_envelope import build as envelope
from topics_actors.storage.frame import HEADER as WAL_HEADER
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import DEL_DELETED, IDX_ENTRY, IDX_ENTRY_BYTES
from topics_actors.storage.snapshot import list_snapshots
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_identity import topic_id
from tools.testing.shard_harness import rec

REPO = pathlib.Path(__file__).resolve().parents[2]
WAL = "wal/shard-00/wal-0000000000000001.log"


def build(env, file_bytes: int | None = None, rounds: int = 2, tail: int = 0) -> str:
    """Two topics, a few records each, two checkpoints (max_events=2 seals segments, so the
    newest snapshot lists sealed and open ones) and `tail` batches of WAL past the last
    checkpoint (with a small `file_bytes`, enough to rotate through several files)."""
    h = env.single(**({"file_bytes": file_bytes} if file_bytes else {}))
    h.put("orders")
    h.append("orders", rec(b'{"a":1}'), rec(b'{"a":2}', tag="t", node="n1"))
    h.put("users")
    h.append("users", rec(b'"u"'))
    checkpointer = env.checkpointer(max_events=2)
    try:
        for n in range(rounds):
            env.checkpoint([h], checkpointer)
            h.append("orders", *[rec(b'{"n":%d,"pad":"%s"}' % (n, b"x" * 200))] * 3)
    finally:
        checkpointer.close()
    for n in range(tail):
        h.append("users", rec(b'{"tail":%d,"pad":"%s"}' % (n, b"y" * 600)))
    h.close()
    return env.data_dir


def run(*argv: str) -> int:
    return cli.main(["fsck", *argv])


def tree_hashes(root: str) -> dict[str, str]:
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return out


def patch(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def flip(path: str, offset: int) -> None:
    with open(path, "rb") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
    patch(path, offset, bytes([byte ^ 0x40]))


def log_end(path: str) -> int:
    scan = FileScan(RealFs(), path)
    for _ in scan.frames():
        pass
    scan.close()
    return scan.valid_len


def segment(data_dir: str, first: int = 1, topic: int = 0) -> tuple[str, str]:
    """(.data, .idx) of segment `first` of the `topic`-th topic dir."""
    root = os.path.join(data_dir, "topics")
    directory = os.path.join(root, sorted(os.listdir(root))[topic])
    stem = os.path.join(directory, f"seg-{first:016d}")
    return stem + ".data", stem + ".idx"


def orders_segment(data_dir: str) -> tuple[str, str]:
    for topic in range(2):
        data, idx = segment(data_dir, 1, topic)
        if os.path.getsize(idx) == 2 * IDX_ENTRY_BYTES:
            return data, idx
    raise AssertionError("no two-record segment")


RECOVERY = "recovery quarantines"      # recovery_check's findings, checked on their own


def only(report: fsck.Report, severity: str) -> fsck.Problem:
    """The one problem of `severity` besides what a restart would quarantine."""
    found = [p for p in report.problems if p.severity == severity
             and not p.reason.startswith(RECOVERY)]
    assert len(found) == 1, report.problems
    return found[0]


def quarantined(report: fsck.Report) -> list[tuple[str, int]]:
    """(topic, first bad seq) of each topic a restart would quarantine."""
    found = [(q["topic"], q["first_bad_seq"]) for q in report.quarantine]
    assert len(found) == sum(p.reason.startswith(RECOVERY) for p in report.problems)
    return found


@pytest.fixture
def built(env) -> str:
    return build(env)


# --- a clean dir ------------------------------------------------------------------------------

def test_clean_dir_has_no_problems(built, capsys):
    report = fsck.check(built)
    assert report.problems == []
    assert report.newest_snapshot == 2
    assert [s.valid for s in report.snapshots] == [True, True]
    assert report.wal_files == 1 and report.wal_groups == 1
    assert report.frames_by_type["APPEND"] == 9
    assert report.frames == sum(report.frames_by_type.values())
    assert report.records == 6 and report.deleted_records == 0
    assert report.segments >= 3 and report.segment_files == 2 * report.segments
    assert report.bytes_read >= report.bytes_total > 0
    assert run(built, "--no-progress") == 0
    out = capsys.readouterr().out
    assert "problems: 0 errors, 0 warnings" in out and "newest valid: 2" in out


def test_fresh_dir_without_snapshots_is_clean(env):
    h = env.single()
    h.put("t")
    h.append("t", rec(), rec())
    h.close()
    report = fsck.check(env.data_dir)
    assert report.problems == [] and report.newest_snapshot is None
    assert report.frames_by_type["APPEND"] == 2 and report.records == 0


def test_check_leaves_every_file_byte_identical(built, capsys):
    patch(os.path.join(built, WAL), log_end(os.path.join(built, WAL)), b"\xee" * 25)
    before = tree_hashes(built)
    fsck.check(built, dump=True)
    assert run(built, "--json", "--dump", "--no-progress") == 0
    assert tree_hashes(built) == before
    capsys.readouterr()


# --- WAL ----------------------------------------------------------------------------------------

def test_torn_wal_tail_reported_with_file_and_offset(built, capsys):
    path = os.path.join(built, WAL)
    end = log_end(path)
    patch(path, end, b"\x30\x00\x00\x00garbage after the last frame")
    report = fsck.check(built)
    problem = only(report, fsck.WARNING)
    assert (problem.path, problem.offset) == (WAL, end)
    assert "torn tail (torn: " in problem.reason and "ignores the 32 bytes" in problem.reason
    assert report.errors == 0
    assert run(built, "--no-progress") == 0          # recovery cuts a torn tail: a warning
    assert f"{WAL}: offset {end}: torn tail" in capsys.readouterr().out


def test_corruption_inside_a_non_last_wal_file_is_an_error(env):
    data_dir = build(env, file_bytes=4096, tail=20)
    files = sorted(os.listdir(os.path.join(data_dir, "wal/shard-00")))
    assert len(files) >= 3
    path = os.path.join(data_dir, "wal/shard-00", files[-2])
    frame_len = WAL_HEADER.unpack_from(pathlib.Path(path).read_bytes(), 0)[0]
    flip(path, frame_len + 4 + 20)                    # inside the second frame's header
    report = fsck.check(data_dir)
    [problem] = [p for p in report.problems if "corruption inside" in p.reason]
    assert problem.severity == fsck.ERROR
    assert problem.path == f"wal/shard-00/{files[-2]}" and problem.offset == frame_len + 4
    assert "corruption inside the file (torn: " in problem.reason
    # ... and what a restart would quarantine, by recovery's own rules
    assert [q["where"] for q in report.quarantine] == [f"{problem.path}@{problem.offset}"]


def test_zeroed_frames_end_a_non_last_file_early_with_a_warning(env):
    data_dir = build(env, file_bytes=4096, tail=20)
    files = sorted(os.listdir(os.path.join(data_dir, "wal/shard-00")))
    path = os.path.join(data_dir, "wal/shard-00", files[-2])
    end = log_end(path)
    # Damage only the last frame's checksum: a torn frame followed by the file's zeros.
    raw = pathlib.Path(path).read_bytes()
    offset = 0
    while offset + 4 + WAL_HEADER.unpack_from(raw, offset)[0] < end:
        offset += 4 + WAL_HEADER.unpack_from(raw, offset)[0]
    flip(path, end - 1)
    report = fsck.check(data_dir)
    warning = [p for p in report.problems if "log ends early" in p.reason]
    assert [(p.path, p.offset, p.severity) for p in warning] == [
        (f"wal/shard-00/{files[-2]}", offset, fsck.WARNING)]


def test_position_past_the_end_of_its_wal_file_is_an_error(built):
    path = os.path.join(built, WAL)
    with open(path, "r+b") as handle:
        handle.truncate(100)
    report = fsck.check(built)
    past = [p for p in report.problems if "past the end of the file" in p.reason]
    assert {(p.path, p.severity) for p in past} == {(WAL, fsck.ERROR)}
    assert all(p.offset > 100 for p in past) and len(past) == 2   # newest and the fallback
    assert run(built, "--no-progress") == 1


def test_missing_wal_file_a_snapshot_needs_is_an_error(env):
    data_dir = build(env, file_bytes=4096, tail=20)
    directory = os.path.join(data_dir, "wal/shard-00")
    files = sorted(os.listdir(directory))
    os.remove(os.path.join(directory, files[-2]))
    report = fsck.check(data_dir)
    assert any(p.path == f"wal/shard-00/{files[-2]}" and p.reason.startswith("missing")
               and p.severity == fsck.ERROR for p in report.problems), report.problems


# --- segments -----------------------------------------------------------------------------------

def test_flipped_byte_in_a_segment_record(built, capsys):
    data, idx = orders_segment(built)
    offset, length, _, _ = IDX_ENTRY.unpack_from(pathlib.Path(idx).read_bytes(), 20)
    flip(data, offset + length - 12)                  # inside the envelope of seq 2
    report = fsck.check(built)
    problem = only(report, fsck.ERROR)
    assert problem.path == os.path.relpath(data, built)
    assert (problem.offset, problem.seq, problem.reason) == (offset, 2, "checksum mismatch")
    assert quarantined(report) == [("orders", 2)]
    assert report.quarantine[0]["would_lose"]["records"] == 1
    assert run(built, "--no-progress") == 1
    assert f"{problem.path}: offset {offset}: seq 2: checksum mismatch" in (
        capsys.readouterr().out)


def test_missing_idx_is_an_error(built):
    _, idx = orders_segment(built)
    os.remove(idx)
    report = fsck.check(built)
    problem = only(report, fsck.ERROR)
    assert problem.path == os.path.relpath(idx, built)
    assert problem.reason.startswith("missing")
    assert quarantined(report) == [("orders", 1)]


def test_short_idx_is_an_error(built):
    _, idx = orders_segment(built)
    with open(idx, "r+b") as handle:
        handle.truncate(IDX_ENTRY_BYTES + 7)
    report = fsck.check(built)
    problem = only(report, fsck.ERROR)
    assert (problem.path, problem.offset) == (os.path.relpath(idx, built), 27)
    assert "holds 1 entries" in problem.reason
    assert quarantined(report) == [("orders", 2)]


def test_deleted_flag_is_counted(built):
    data, idx = orders_segment(built)
    offset, length, _, _ = IDX_ENTRY.unpack_from(pathlib.Path(idx).read_bytes(), 0)
    patch(data, offset + length - 1, bytes([DEL_DELETED]))
    report = fsck.check(built)
    assert report.problems == [] and report.deleted_records == 1


def test_orphan_segment_is_a_warning(built):
    data, idx = orders_segment(built)
    directory = os.path.dirname(data)
    for source, suffix in ((data, "data"), (idx, "idx")):
        target = os.path.join(directory, f"seg-0000000000000777.{suffix}")
        pathlib.Path(target).write_bytes(pathlib.Path(source).read_bytes())
    report = fsck.check(built)
    problem = only(report, fsck.WARNING)
    assert problem.path == os.path.relpath(directory, built) + "/seg-0000000000000777.{data,idx}"
    assert "orphan" in problem.reason and report.orphan_segments == 1
    assert run(built, "--no-progress") == 0


# --- snapshots ----------------------------------------------------------------------------------

def test_corrupt_snapshot_reports_the_check_and_the_fallback(built):
    newest = list_snapshots(RealFs(), built)[0][1]
    flip(newest, os.path.getsize(newest) - 3)
    report = fsck.check(built)
    assert report.newest_snapshot == 1
    assert [(s.id, s.valid, s.reason) for s in report.snapshots] == [
        (2, False, "checksum mismatch"), (1, True, "")]
    bad = [p for p in report.problems if p.path == "meta/snapshot-0000000000000002.bin"]
    assert [(p.severity, p.reason) for p in bad] == [
        (fsck.ERROR, "checksum mismatch; recovery uses snapshot 1 instead")]
    assert run(built, "--no-progress") == 1


def test_bad_snapshot_magic_is_named(built):
    newest = list_snapshots(RealFs(), built)[0][1]
    patch(newest, 0, b"XXXX")
    problem = next(p for p in fsck.check(built).problems if p.path.startswith("meta/"))
    assert problem.reason.startswith("bad magic b'XXXX'")


# --- the command line ---------------------------------------------------------------------------

def test_json_output_parses_and_has_the_counts(built, capsys):
    data, _ = orders_segment(built)
    flip(data, 40)
    assert run(built, "--json", "--no-progress") == 1
    report = json.loads(capsys.readouterr().out)
    # the damaged record, and the topic a restart would quarantine for it
    assert report["ok"] is False and report["errors"] == 2 and report["warnings"] == 0
    assert [q["topic"] for q in report["quarantine"]] == ["orders"]
    assert report["frames_by_type"]["APPEND"] == 9 and report["newest_snapshot"] == 2
    assert report["files"] == report["wal_files"] + 2 + report["segment_files"]
    assert report["problems"][0]["path"] == os.path.relpath(data, built)
    assert {"records", "frames", "bytes_read", "bytes_total"} <= set(report)


def test_dump_prints_one_line_per_frame_and_record(built, capsys):
    assert run(built, "--dump", "--no-progress") == 0
    lines = capsys.readouterr().out.splitlines()
    frames = [line for line in lines if line.startswith(WAL + "@")]
    records = [line for line in lines if " RECORD " in line]
    assert len(frames) == fsck.check(built).frames and len(records) == 6
    assert " APPEND tid=" in frames[2] and " seq=1 " in frames[2]
    assert "node=2 tag=1" in records[1]


def test_missing_dir_and_usage_errors_exit_2(tmp_path, capsys):
    assert run(str(tmp_path / "nope")) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "somewhere").mkdir()
    (tmp_path / "somewhere" / "notes.txt").write_text("not a node's")
    assert run(str(tmp_path / "somewhere")) == 2      # was 0: an empty report, "no problems"
    assert "not a topics data directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fsck"])
    assert exit_info.value.code == 2


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"topics {topics_actors.__version__}"


def test_subprocess_cli_and_tools_script(built):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    module = subprocess.run([sys.executable, "-m", "supervisor.cli", "fsck", built],
                            capture_output=True, text=True, env=env, timeout=60)
    assert module.returncode == 0, module.stderr
    assert "problems: 0 errors" in module.stdout
    assert "fsck [" not in module.stderr              # stderr is not a TTY: no bar
    flip(orders_segment(built)[0], 40)
    tool = subprocess.run([sys.executable, str(REPO / "tools/fsck.py"), built, "--progress"],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert tool.returncode == 1, tool.stderr
    assert "checksum mismatch" in tool.stdout and "100.0%" in tool.stderr


# --- progress -----------------------------------------------------------------------------------

def test_progress_is_monotone_and_ends_at_the_total(env, monkeypatch):
    data_dir = build(env, file_bytes=4096, tail=20)
    monkeypatch.setattr(progress_meter, "PROGRESS_INTERVAL_S", 0.0)
    monkeypatch.setattr(fsck, "PROGRESS_EVERY", 1)
    calls: list[tuple[int, int]] = []
    report = fsck.check(data_dir, progress=lambda done, total: calls.append((done, total)))
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(data_dir)
                for n in names if n != "LAYOUT")
    assert len(calls) > 5
    assert {t for _, t in calls} == {total} == {report.bytes_total}
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert calls[0][0] == 0 and calls[-1] == (total, total)


def test_progress_is_throttled(built):
    calls: list[tuple[int, int]] = []
    fsck.check(built, progress=lambda done, total: calls.append((done, total)))
    assert len(calls) <= 3 and calls[-1][0] == calls[-1][1]


def test_retired_groups_are_checked_too(env):
    h = env.single()
    h.put("old")
    h.append("old", rec(), rec())
    h.close()
    cluster = env.cluster(2)                       # retires shard-00 under retired-0001
    for h in cluster:
        h.put(f"new{h.shard}")
        h.append(f"new{h.shard}", rec())
    env.checkpoint(cluster)
    for h in cluster:
        h.close()
    report = fsck.check(env.data_dir)
    assert report.problems == []
    assert report.wal_groups == 3 and report.frames_by_type["APPEND"] == 4
    assert os.path.isdir(os.path.join(env.data_dir, "wal/retired-0001/shard-00"))
    path = os.path.join(env.data_dir, "wal/retired-0001/shard-00/wal-0000000000000001.log")
    patch(path, log_end(path), b"\x01\x02\x03\x04\x05")
    problem = only(fsck.check(env.data_dir), fsck.WARNING)
    assert problem.path == "wal/retired-0001/shard-00/wal-0000000000000001.log"


# --- what a restart would quarantine (recovery_check.py) ------------------------------------

def test_a_seq_gap_only_recovery_rules_see_is_an_error(built, capsys):
    """A well-formed Append past the topic's head: every frame and segment checks out, but
    recovery would quarantine the topic, so fsck says so (and exits 1)."""
    path = os.path.join(built, WAL)
    forged = bytearray()
    encode(forged, FrameType.APPEND, 0, topic_id("users"), 50, 1, envelope(b'"gap"', None))
    patch(path, log_end(path), bytes(forged))
    report = fsck.check(built)
    assert quarantined(report) == [("users", 2)] and report.errors == 1
    assert "append of seq 50 after head 1" in report.quarantine[0]["reason"]
    assert run(built, "--no-progress") == 1
    assert "recovery quarantines topic 'users'" in capsys.readouterr().out


def test_an_unreadable_layout_is_reported_not_a_crash(built):
    patch(os.path.join(built, "wal", "LAYOUT"), 0, b"{nope")
    report = fsck.check(built)
    assert any("does not parse as a layout" in p.reason for p in report.problems)
    assert report.quarantine == []
