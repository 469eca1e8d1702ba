"""One fsck pass over a data dir: every file listed and sized up front (so the progress total
is known before the first read), the one way files are read, and the report problems go to.

Files are read with pread, never mapped: a running server may cut a file (recovery, the
compactor reopening a segment) and a mapping would then fault.
"""

from __future__ import annotations

import os
import re
from typing import TextIO

import orjson

from topics_actors.fsck.report import ERROR, WARNING, Problem, Report
from topics_actors.progress_meter import Progress, ProgressMeter
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import list_segment_files, segment_stem
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.snapshot import list_snapshots
from topics_actors.storage.wal_layout import group_key, list_wal_files, retired_groups, wal_root

READ_CHUNK = 16 * 1024 * 1024
_SHARD_RE = re.compile(r"^shard-(\d{2})$")


class Scan:
    def __init__(self, fs: Fs, tiers: Tiers, dump_out: TextIO | None, progress_every: int):
        self.fs, self.tiers, self.dump_out = fs, tiers, dump_out
        self.progress_every = progress_every    # frames or records between looks at the clock
        self.data_dir = data_dir = tiers.data_dir
        self.report = Report(data_dir)
        self.progress = ProgressMeter(0, None)
        self.groups: list[tuple[str, str, list[tuple[int, str, int]]]] = []
        self.snapshot_files: list[tuple[int, str, int]] = []
        self.segment_sizes: dict[str, int] = {}
        self.valid: list[tuple[int, str, dict]] = []     # (id, rel, body), newest first

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

    # --- the inventory --------------------------------------------------------------------------

    def plan(self, callback: Progress | None) -> None:
        """List and size every file up front, then start the progress over their total."""
        roots = [os.path.join(self.data_dir, d) for d in ("wal", "meta", "topics")]
        if not any(self.fs.is_dir(root) for root in roots):
            self.problem(WARNING, ".", "no wal/, meta/ or topics/: not a topics data dir?")
        self.snapshot_files = [(i, p, s) for i, p in list_snapshots(self.fs, self.data_dir)
                               if (s := self.size_of(p)) is not None]
        self.plan_wal()
        self.plan_segments()
        total = (sum(size for _, _, size in self.snapshot_files)
                 + sum(size for _, _, files in self.groups for _, _, size in files)
                 + sum(self.segment_sizes.values()))
        self.report.bytes_total = total
        self.progress = ProgressMeter(total, callback)
        self.progress.set(0)

    def plan_wal(self) -> None:
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

    def plan_segments(self) -> None:
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


class Check:
    """A check of one kind of file over a Scan; the scan's helpers are bound for brevity."""

    def __init__(self, scan: Scan):
        self.scan, self.report, self.data_dir = scan, scan.report, scan.data_dir
        self.rel, self.problem, self.read = scan.rel, scan.problem, scan.read

    @property
    def progress(self) -> ProgressMeter:
        return self.scan.progress


def text_len(text: str | None) -> int:
    """Bytes of a frame's optional text field, as the dump shows them."""
    return len(text.encode()) if text else 0
