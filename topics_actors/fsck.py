"""fsck: verify a data dir, read-only (spec/storage.md 1).

Checks every WAL file of every group (current and retired), every snapshot file, and every
segment the newest valid snapshot lists; reports each problem with its file and offset.

An *error* is damage recovery cannot simply undo or that endangers records: a corrupt
snapshot or segment record, corruption inside a WAL file, a checkpoint position the WAL
cannot honour, a missing file someone still needs. A *warning* is what recovery handles by
design (the torn tail of a group's last file, an orphan segment of a crashed compactor) or
what a running server can cause (a file that vanished during the check).

Files are read with pread, never mapped: a running server may cut a file (recovery, the
compactor reopening a segment) and a mapping would then fault. Nothing is locked, created
or written, so the check can run next to a live server.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from typing import TextIO

import orjson

from topics_actors.errors import CorruptionError
from topics_actors.storage.frame import FRAME_LEN_MIN, decode_at
from topics_actors.storage.frame_types import FrameType
from topics_actors.progress_meter import Progress, ProgressMeter
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import (
    DEL_DELETED, DEL_LIVE, IDX_ENTRY, IDX_ENTRY_BYTES, decode_frame, list_segment_files,
    segment_stem,
)
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.snapshot import decode_snapshot, list_snapshots
from topics_actors.storage.wal_layout import (
    group_key, list_wal_files, retired_groups, wal_file_name, wal_root,
)
from topics_actors.storage.wal_scan import describe_end

log = logging.getLogger(__name__)

ERROR = "error"
WARNING = "warning"
PROGRESS_EVERY = 4096             # frames or records between looks at the clock
READ_CHUNK = 16 * 1024 * 1024
_SHARD_RE = re.compile(r"^shard-(\d{2})$")
_FRAME_AT_RE = re.compile(r"^frame at offset \d+: ")
_TOPIC_KEYS = ("name", "tid", "dir", "segments", "absorbed")
_TYPE_NAMES = {int(t): t.name for t in FrameType}



@dataclasses.dataclass
class Problem:
    severity: str
    path: str                 # relative to the data dir
    reason: str
    offset: int | None = None
    seq: int | None = None

    def __str__(self) -> str:
        parts = [self.path, self.offset is not None and f"offset {self.offset}",
                 self.seq is not None and f"seq {self.seq}", self.reason]
        return ": ".join(part for part in parts if part)


@dataclasses.dataclass
class SnapshotInfo:
    id: int
    path: str
    size: int
    valid: bool
    reason: str = ""


@dataclasses.dataclass
class Report:
    data_dir: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    snapshots: list[SnapshotInfo] = dataclasses.field(default_factory=list)
    newest_snapshot: int | None = None
    wal_groups: int = 0
    wal_files: int = 0
    wal_bytes: int = 0
    frames: int = 0
    frames_by_type: dict[str, int] = dataclasses.field(default_factory=dict)
    segments: int = 0
    segment_files: int = 0
    segment_bytes: int = 0
    records: int = 0
    deleted_records: int = 0
    orphan_segments: int = 0
    bytes_total: int = 0
    bytes_read: int = 0

    @property
    def errors(self) -> int:
        return sum(p.severity == ERROR for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.severity == WARNING for p in self.problems)

    @property
    def ok(self) -> bool:
        return self.errors == 0

    @property
    def files(self) -> int:
        return self.wal_files + len(self.snapshots) + self.segment_files

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(ok=self.ok, errors=self.errors, warnings=self.warnings, files=self.files)
        return out


def check(data_dir: str, dump: bool = False, progress: Progress | None = None,
          out: TextIO | None = None, cold_dir: str | None = None) -> Report:
    """Verify `data_dir` without modifying it. With `dump`, one line per WAL frame and
    segment record goes to `out` (stdout). `progress(bytes_done, bytes_total)` is called at
    most ~10 times a second, with monotone values, and last with (total, total)."""
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"not a directory: {data_dir}")
    checker = _Checker(RealFs(), Tiers(data_dir, cold_dir), (out or sys.stdout) if dump else None)
    checker.run(progress)
    log.debug("event=fsck_done dir=%s errors=%d", data_dir, checker.report.errors)
    return checker.report


@dataclasses.dataclass
class _WalFile:
    rel: str
    size: int = 0
    valid_len: int = 0
    hits: set[int] = dataclasses.field(default_factory=set)   # wanted offsets on a boundary


class _Checker:
    def __init__(self, fs: RealFs, tiers: Tiers, dump_out: TextIO | None):
        self.fs, self.tiers, self.dump_out = fs, tiers, dump_out
        self.data_dir = data_dir = tiers.data_dir
        self.report = Report(data_dir)
        self.progress = ProgressMeter(0, None)
        self.groups: list[tuple[str, str, list[tuple[int, str, int]]]] = []
        self.snapshot_files: list[tuple[int, str, int]] = []
        self.segment_sizes: dict[str, int] = {}
        self.valid: list[tuple[int, str, dict]] = []     # (id, rel, body), newest first
        self.wal: dict[tuple[str, int], _WalFile | None] = {}   # None: vanished

    # --- reporting ----------------------------------------------------------------------------

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.data_dir).replace(os.sep, "/")

    def problem(self, severity: str, path: str, reason: str, offset: int | None = None,
                seq: int | None = None) -> Problem:
        found = Problem(severity, path, reason, offset, seq)
        self.report.problems.append(found)
        return found

    def read(self, path: str) -> bytes | None:
        """The whole file; None (and a warning) when it vanished or cannot be read."""
        try:
            handle = self.fs.open_read(path)
        except FileNotFoundError:
            self.problem(WARNING, self.rel(path), "vanished during the check (server running?)")
            return None
        except OSError as exc:
            self.problem(ERROR, self.rel(path), f"cannot be read: {exc.strerror}")
            return None
        try:
            size, chunks, done = handle.size(), [], 0
            while done < size:
                chunk = handle.read_at(min(READ_CHUNK, size - done), done)
                if not chunk:
                    break        # cut by a running server meanwhile: read what is there
                chunks.append(chunk)
                done += len(chunk)
        finally:
            handle.close()
        self.report.bytes_read += done
        return b"".join(chunks)

    # --- the run ----------------------------------------------------------------------------------

    def run(self, callback: Progress | None) -> None:
        self.plan()
        total = (sum(size for _, _, size in self.snapshot_files)
                 + sum(size for _, _, files in self.groups for _, _, size in files)
                 + sum(self.segment_sizes.values()))
        self.report.bytes_total = total
        self.progress = ProgressMeter(total, callback)
        self.progress.set(0)
        self.check_snapshots()
        self.check_wal()
        for index, (snap_id, snap_rel, body) in enumerate(self.valid[:2]):
            self.check_positions(snap_id, snap_rel, body, fallback=index > 0)
        self.check_segments()
        self.progress.finish()

    def plan(self) -> None:
        """List and size every file up front, so the progress total is known."""
        roots = [os.path.join(self.data_dir, d) for d in ("wal", "meta", "topics")]
        if not any(self.fs.is_dir(root) for root in roots):
            self.problem(WARNING, ".", "no wal/, meta/ or topics/: not a topics data dir?")
        self.snapshot_files = [(i, p, s) for i, p in list_snapshots(self.fs, self.data_dir)
                               if (s := self.size_of(p)) is not None]
        generation = self.read_layout()
        groups = retired_groups(self.fs, self.data_dir)
        root = wal_root(self.data_dir)
        if self.fs.is_dir(root):
            groups += [(group_key(generation, name), os.path.join(root, name))
                       for name in self.fs.listdir(root) if _SHARD_RE.match(name)]
        for key, directory in groups:
            files = [(i, p, s) for i, p in list_wal_files(self.fs, directory)
                     if (s := self.size_of(p)) is not None]
            self.groups.append((key, directory, files))
        for topics, name in [(root, name) for root in self.tiers.roots()
                             if self.fs.is_dir(root) for name in self.fs.listdir(root)]:
            directory = os.path.join(topics, name)
            if not self.fs.is_dir(directory):
                continue
            for first, parts in list_segment_files(self.fs, directory).items():
                for part in parts:
                    path = os.path.join(directory, f"{segment_stem(first)}.{part}")
                    size = self.size_of(path)
                    if size is not None:
                        self.segment_sizes[path] = size

    def size_of(self, path: str) -> int | None:
        try:
            return self.fs.file_size(path)
        except FileNotFoundError:
            return None

    def read_layout(self) -> int:
        path = os.path.join(wal_root(self.data_dir), "LAYOUT")
        if not self.fs.exists(path):
            return 1
        raw = self.read(path) or b""
        try:
            layout = orjson.loads(raw)
            shards, generation = int(layout["shards"]), int(layout["generation"])
        except (KeyError, TypeError, ValueError):
            self.problem(ERROR, self.rel(path), f"does not parse as a layout: {raw[:80]!r}")
            return 1
        root = wal_root(self.data_dir)
        for name in self.fs.listdir(root):
            match = _SHARD_RE.match(name)
            if match and int(match.group(1)) >= shards:
                self.problem(WARNING, self.rel(os.path.join(root, name)),
                             f"not part of the layout ({shards} shards): never replayed")
        return generation

    # --- snapshots ------------------------------------------------------------------------------

    def check_snapshots(self) -> None:
        bad: list[tuple[int, Problem]] = []
        for snap_id, path, size in self.snapshot_files:
            rel, raw = self.rel(path), self.read(path)
            self.progress.set(self.progress.done + size)
            if raw is None:
                continue
            try:
                body = decode_snapshot(raw)
                reason = _body_problem(body)
            except CorruptionError as error:
                body, reason = None, error.message
            info = SnapshotInfo(snap_id, rel, size, reason is None, reason or "")
            self.report.snapshots.append(info)
            if reason is not None:
                if body is not None:
                    reason = f"decodes but recovery cannot use it: {reason}"
                bad.append((snap_id, self.problem(ERROR, rel, reason)))
                continue
            if body["id"] != snap_id:
                self.problem(WARNING, rel, f"body id {body['id']} differs from the file name")
            self.valid.append((snap_id, rel, body))
        newest = self.valid[0][0] if self.valid else None
        self.report.newest_snapshot = newest
        for snap_id, problem in bad:
            if newest is None:
                problem.reason += "; no valid snapshot: recovery replays the whole WAL"
            elif snap_id > newest:
                problem.reason += f"; recovery uses snapshot {newest} instead"

    def check_positions(self, snap_id: int, snap_rel: str, body: dict, fallback: bool) -> None:
        """A position must name an existing WAL file and a frame boundary inside its log."""
        known = {key: directory for key, directory, _ in self.groups}
        role = f"snapshot {snap_id}" + (" (the fallback)" if fallback else "")
        for key, (idx, offset) in sorted(body["positions"].items()):
            if (idx, offset) == (0, 0) or key in body["retired_done"]:
                continue           # nothing absorbed, or a retired group it no longer needs
            if key not in known:
                self.problem(ERROR, snap_rel, f"position ({idx}, {offset}) of WAL group {key} "
                             "but the group does not exist")
                continue
            if (key, idx) not in self.wal:
                path = os.path.join(known[key], wal_file_name(idx))
                self.problem(ERROR, self.rel(path),
                             f"missing, but {role} resumes group {key} in it at {offset}")
                continue
            wal = self.wal[(key, idx)]
            if wal is None:
                continue           # vanished during the check: already reported
            where = f"position of {role}"
            if offset > wal.size:
                self.problem(ERROR, wal.rel, f"{where} is past the end of the file "
                             f"({wal.size} bytes)", offset)
            elif offset > wal.valid_len:
                self.problem(ERROR, wal.rel, f"{where} lies beyond the log end at "
                             f"{wal.valid_len}", offset)
            elif offset not in wal.hits:
                self.problem(ERROR, wal.rel, f"{where} is not on a frame boundary", offset)

    # --- WAL --------------------------------------------------------------------------------------

    def check_wal(self) -> None:
        wanted: dict[tuple[str, int], set[int]] = {}
        for _, _, body in self.valid[:2]:
            for key, (idx, offset) in body["positions"].items():
                wanted.setdefault((key, idx), set()).add(offset)
        for key, directory, files in self.groups:
            self.report.wal_groups += 1
            self.check_continuity(key, directory, [idx for idx, _, _ in files])
            for n, (idx, path, size) in enumerate(files):
                base = self.progress.done
                self.wal[(key, idx)] = self.check_wal_file(
                    path, n == len(files) - 1, wanted.get((key, idx), set()), base)
                self.progress.set(base + size)

    def check_continuity(self, key: str, directory: str, present: list[int]) -> None:
        """Every file from the lowest one a usable snapshot replays from must be there."""
        usable = self.valid[:2]
        needs = [max(1, body["positions"].get(key, (0, 0))[0])
                 for _, _, body in usable if key not in body["retired_done"]]
        if usable and not needs:
            return                 # every usable snapshot has absorbed this retired group
        floor = min(needs) if needs else 1
        who = "the snapshots need" if usable else "with no valid snapshot, replay needs"
        have = set(present)
        for idx in range(floor, max(present, default=0)):
            if idx not in have:
                self.problem(ERROR, self.rel(os.path.join(directory, wal_file_name(idx))),
                             f"missing: {who} group {key} from file {floor} on")

    def check_wal_file(self, path: str, last: bool, wanted: set[int],
                       base: int) -> _WalFile | None:
        data = self.read(path)
        if data is None:
            return None
        wal, report = _WalFile(self.rel(path), len(data)), self.report
        report.wal_files += 1
        report.wal_bytes += len(data)
        offset, size, by_type = 0, len(data), report.frames_by_type
        while True:
            if offset in wanted:
                wal.hits.add(offset)
            frame = decode_at(data, offset, size)
            if frame is None:
                break
            report.frames += 1
            name = _TYPE_NAMES[frame.type]    # decode_at admits known types only
            by_type[name] = by_type.get(name, 0) + 1
            if self.dump_out is not None:
                print(f"{wal.rel}@{offset} {name} tid={frame.topic_id:016x} seq={frame.seq} "
                      f"ts={frame.ts} data={len(frame.data)} node={_len(frame.node)} "
                      f"tag={_len(frame.tag)} size={frame.size} flags={frame.flags:#x}",
                      file=self.dump_out)
            offset += frame.size
            if report.frames % PROGRESS_EVERY == 0:
                self.progress.set(base + offset)
        wal.valid_len = offset
        self.check_wal_end(wal, data, last)
        return wal

    def check_wal_end(self, wal: _WalFile, data: bytes, last: bool) -> None:
        """Classify what follows the log: zeros (a clean end), a torn tail, or corruption."""
        offset, size = wal.valid_len, len(data)
        data_end = len(data.rstrip(b"\x00"))     # one past the last non-zero byte
        if data_end <= offset:
            return
        reason = describe_end(data, offset, size)
        if not reason.startswith("torn"):
            reason = f"torn: zeros, then data up to offset {data_end}"
        if last:
            self.problem(WARNING, wal.rel, f"torn tail ({reason}); recovery ignores the "
                         f"{data_end - offset} bytes after the log end", offset)
            return
        frame_len = int.from_bytes(data[offset:offset + 4], "little")
        claimed_end = offset + 4 + frame_len if frame_len >= FRAME_LEN_MIN else offset + 4
        if data_end <= claimed_end:
            # One damaged frame and then the preallocated zeros: the end of this file's log.
            self.problem(WARNING, wal.rel, f"log ends early ({reason}); the rest of the file "
                         "is zeros", offset)
        else:
            self.problem(ERROR, wal.rel, f"corruption inside the file ({reason}): non-zero "
                         f"bytes follow up to offset {data_end}, their frames are lost",
                         offset)

    # --- segments ---------------------------------------------------------------------------------

    def check_segments(self) -> None:
        listed: set[str] = set()
        for n, (snap_id, snap_rel, body) in enumerate(self.valid[:2]):
            for entry in body["topics"]:
                directory = os.path.join(self.data_dir, entry["dir"]) if entry["dir"] else ""
                segments = entry["segments"]
                if segments and not directory:
                    self.problem(ERROR, snap_rel, f"topic {entry['name']!r} lists segments "
                                 "but no directory")
                    continue
                for i, (first, count, data_len) in enumerate(segments):
                    stems = self.stems(directory, first)
                    stem = stems[0]
                    listed.update(s + part for s in stems for part in (".data", ".idx"))
                    if n == 0:
                        is_open = bool(entry.get("open")) and i == len(segments) - 1
                        self.check_segment(entry, stem, first, count, data_len, is_open)
                    elif n == 1:
                        self.check_fallback_segment(snap_id, stem)
                if n == 0:
                    self.check_segment_order(entry)
        self.check_orphans(listed)

    def stems(self, directory: str, first: int) -> list[str]:
        """A listed segment's path stem in each tier, the one readers use first."""
        hot = os.path.join(directory, segment_stem(first))
        cold_dir = self.tiers.cold_of(directory)
        if cold_dir is None:
            return [hot]
        cold = os.path.join(cold_dir, segment_stem(first))
        cold_only = hot + ".data" not in self.segment_sizes and cold + ".data" in self.segment_sizes
        return [cold, hot] if cold_only else [hot, cold]

    def check_segment_order(self, entry: dict) -> None:
        end = 0
        for first, count, _ in entry["segments"]:
            where = self.rel(os.path.join(self.data_dir, entry["dir"], segment_stem(first)))
            if first <= end:
                self.problem(ERROR, where, f"overlaps the previous segment (ends at seq {end})")
            end = first + count - 1
            if end > entry["absorbed"]:
                self.problem(ERROR, where, f"ends at seq {end}, past the topic's absorbed "
                             f"seq {entry['absorbed']}")

    def check_fallback_segment(self, snap_id: int, stem: str) -> None:
        for path in (stem + ".data", stem + ".idx"):
            if path not in self.segment_sizes:
                self.problem(WARNING, self.rel(path), f"missing: listed by snapshot {snap_id}, "
                             "so a fallback to it would fail")

    def check_segment(self, entry: dict, stem: str, first: int, count: int, data_len: int,
                      is_open: bool) -> None:
        report, data_path, idx_path = self.report, stem + ".data", stem + ".idx"
        report.segments += 1
        base = self.progress.done
        planned = self.segment_sizes.get(data_path, 0) + self.segment_sizes.get(idx_path, 0)
        parts = []
        for path in (data_path, idx_path):
            if path not in self.segment_sizes:
                self.problem(ERROR, self.rel(path), "missing (listed by the newest snapshot)")
                parts.append(None)
                continue
            parts.append(self.read(path))
            if parts[-1] is not None:
                report.segment_files += 1
                report.segment_bytes += len(parts[-1])
        data, idx = parts
        if data is not None and idx is not None:
            self.check_lengths(data_path, idx_path, data, idx, count, data_len, is_open)
            self.check_records(entry, data_path, idx_path, data, idx, first, count, data_len,
                               base)
        self.progress.set(base + planned)

    def check_lengths(self, data_path: str, idx_path: str, data: bytes, idx: bytes,
                      count: int, data_len: int, is_open: bool) -> None:
        entries = len(idx) // IDX_ENTRY_BYTES
        if entries < count:
            self.problem(ERROR, self.rel(idx_path), f"holds {entries} entries, the newest "
                         f"snapshot lists {count}", len(idx))
        if len(data) < data_len:
            self.problem(ERROR, self.rel(data_path), f"is {len(data)} bytes, the newest "
                         f"snapshot lists {data_len}", len(data))
        if not is_open and (entries > count or len(data) > data_len):
            # A sealed segment is written whole; only the open one grows past the snapshot.
            self.problem(WARNING, self.rel(data_path), "sealed segment holds bytes past the "
                         "snapshot's count (ignored)", data_len)

    def check_records(self, entry: dict, data_path: str, idx_path: str, data: bytes,
                      idx: bytes, first: int, count: int, data_len: int, base: int) -> None:
        report, data_rel = self.report, self.rel(data_path)
        limit, expected = min(len(data), data_len), 0
        for i in range(min(count, len(idx) // IDX_ENTRY_BYTES)):
            seq = first + i
            offset, length, ts, flags = IDX_ENTRY.unpack_from(idx, i * IDX_ENTRY_BYTES)
            if offset != expected:
                self.problem(ERROR, self.rel(idx_path), f"entry points at .data offset "
                             f"{offset}, expected {expected} (segments are dense)",
                             i * IDX_ENTRY_BYTES, seq)
            expected = offset + length
            if offset + length > limit:
                self.problem(ERROR, data_rel, f".idx entry (len {length}) points past the "
                             f"end of the data ({limit} bytes)", offset, seq)
                continue
            try:
                record = decode_frame(data, offset, offset + length)
            except CorruptionError as error:
                self.problem(ERROR, data_rel, _FRAME_AT_RE.sub("", error.message), offset, seq)
                continue
            report.records += 1
            reason = _record_problem(record, data, offset, length, seq, ts, flags)
            if reason:
                self.problem(ERROR, data_rel, reason, offset, seq)
            elif data[offset + length - 1] not in (DEL_LIVE, DEL_DELETED):
                self.problem(WARNING, data_rel, f"del byte {data[offset + length - 1]:#04x} "
                             "is neither live nor deleted (reads as live)", offset, seq)
            report.deleted_records += record.deleted
            if self.dump_out is not None:
                print(f"{data_rel}@{offset} RECORD tid={entry['tid']:016x} seq={record.seq} "
                      f"ts={record.ts} data={len(record.envelope)} node={_len(record.node)} "
                      f"tag={_len(record.tag)} size={length}"
                      + (" deleted" if record.deleted else ""), file=self.dump_out)
            if report.records % PROGRESS_EVERY == 0:
                self.progress.set(base + offset)

    def check_orphans(self, listed: set[str]) -> None:
        """Segment files no decodable snapshot lists: a crashed compactor's leftovers or a
        dropped segment (the reclaimer sweeps them), or one a live compactor is writing."""
        stems: dict[str, list[str]] = {}
        for path in self.segment_sizes:
            if path not in listed:
                stem, part = path.rsplit(".", 1)
                stems.setdefault(stem, []).append(part)
        for stem, parts in sorted(stems.items()):
            self.report.orphan_segments += 1
            suffix = parts[0] if len(parts) == 1 else "{" + ",".join(sorted(parts)) + "}"
            self.problem(WARNING, f"{self.rel(stem)}.{suffix}",
                         "orphan segment: listed by neither the newest nor the previous "
                         "valid snapshot (a crashed or a running compactor's)")
            self.progress.set(self.progress.done + sum(
                self.segment_sizes[f"{stem}.{part}"] for part in parts))


def _record_problem(record, data: bytes, offset: int, length: int, seq: int, ts: int,
                    flags: int) -> str | None:
    frame_len = int.from_bytes(data[offset:offset + 4], "little")
    if frame_len + 4 != length:
        return f".idx entry says {length} bytes, the frame is {frame_len + 4}"
    if record.seq != seq:
        return f"the frame holds seq {record.seq}"
    if (record.ts, record.flags) != (ts, flags):
        return (f".idx entry (ts {ts}, flags {flags:#x}) disagrees with the frame "
                f"(ts {record.ts}, flags {record.flags:#x})")
    return None


def _body_problem(body: dict) -> str | None:
    """What makes a decodable snapshot body unusable by recovery, or None."""
    for key, kind in (("id", int), ("positions", dict), ("retired_done", (list, tuple)),
                      ("topics", (list, tuple))):
        if not isinstance(body.get(key), kind):
            return f"body has no valid {key!r}"
    for key, position in body["positions"].items():
        if not _ints(position, 2):
            return f"position of {key!r} is not [file idx, offset]"
    for entry in body["topics"]:
        if not isinstance(entry, dict) or any(k not in entry for k in _TOPIC_KEYS):
            return f"a topic entry lacks one of {', '.join(_TOPIC_KEYS)}"
        if not all(_ints(segment, 3) for segment in entry["segments"]):
            return f"topic {entry['name']!r}: a segment is not [first_seq, count, data_len]"
    return None


def _ints(value, n: int) -> bool:
    return (isinstance(value, (list, tuple)) and len(value) == n
            and all(isinstance(v, int) for v in value))


def _len(text: str | None) -> int:
    return len(text.encode()) if text else 0
