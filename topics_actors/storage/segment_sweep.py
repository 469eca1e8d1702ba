"""Removing segment files no kept snapshot lists, in both tiers (the reclaimer's sweep).

Segment files become unlisted when the compactor drops a segment wholly below a topic's
floors, when a topic is deleted, and when a crashed checkpoint leaves files its snapshot
never listed. A file is removed only if no snapshot on disk lists it: the newest snapshot
and the previous one (kept for fallback) both keep their segments. If any snapshot on disk
cannot be read, nothing is removed: never unlink on incomplete knowledge. Run it only while
holding the segment lock, so no checkpoint is between creating a file and listing it.
"""

from __future__ import annotations

import logging
import os

from topics_actors.errors import TopicsError
from topics_actors.storage import failpoint, snapshot
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import list_segment_files, segment_stem
from topics_actors.storage.segment_tier import Tiers

log = logging.getLogger(__name__)


def snapshot_bodies(fs: Fs, data_dir: str) -> list[dict] | None:
    """Every snapshot on disk, decoded and checked, newest first; None when one cannot be
    read (then nothing may be removed)."""
    bodies = []
    for _snap_id, path in snapshot.list_snapshots(fs, data_dir):
        try:
            body = snapshot.decode_snapshot(snapshot.read_file(fs, path))
            if not all(key in body for key in snapshot.BODY_KEYS):
                raise KeyError("a required key is missing")
        except (TopicsError, OSError, KeyError, TypeError, ValueError) as error:
            log.warning("event=sweep_skipped snapshot=%s reason=%r", path, error)
            return None
        bodies.append(body)
    return bodies


def kept_segments(bodies: list[dict]) -> dict[str, set[int]]:
    """Topic directory name -> first seqs that some of the snapshots lists."""
    keep: dict[str, set[int]] = {}
    for body in bodies:
        for entry in body["topics"]:
            if entry["dir"]:
                firsts = keep.setdefault(os.path.basename(entry["dir"]), set())
                firsts.update(int(s[0]) for s in entry["segments"])
    return keep


def sweep(fs: Fs, tiers: Tiers, keep: dict[str, set[int]]) -> int:
    """Remove unlisted segment files and topic directories in every tier; returns the
    number of files removed."""
    removed = 0
    for root in tiers.roots():
        if not fs.is_dir(root):
            continue
        for name in fs.listdir(root):
            directory = os.path.join(root, name)
            wanted = keep.get(name, set())
            for first, parts in list_segment_files(fs, directory).items():
                if first not in wanted:
                    removed += remove_segment(fs, directory, first, parts)
            if name not in keep:
                remove_dir(fs, directory)
    return removed


def remove_segment(fs: Fs, directory: str, first: int, parts: set[str]) -> int:
    """Unlink a segment's files, .data first (a lone .idx is never a complete segment),
    tolerating files already gone, then sync the directory."""
    for i, part in enumerate(sorted(parts)):
        if i:
            failpoint.hit("reclaim::between_unlinks")
        try:
            fs.remove(os.path.join(directory, f"{segment_stem(first)}.{part}"))
        except FileNotFoundError:
            pass
    fs.sync_dir(directory)
    log.info("event=segment_removed dir=%s first_seq=%d", directory, first)
    return len(parts)


def remove_dir(fs: Fs, directory: str) -> None:
    """Remove a directory and the files in it."""
    for name in fs.listdir(directory):
        fs.remove(os.path.join(directory, name))
    fs.rmdir(directory)
