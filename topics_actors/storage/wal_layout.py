"""Where WAL files live, and what happens when the shard count changes.

    <data>/wal/LAYOUT                      {"shards": n, "generation": g}
    <data>/wal/shard-NN/wal-<idx:016>.log  one group per shard of the current layout
    <data>/wal/shard-NN/wal-<idx>.log.pre  the next file, zeroed ahead of rotation
    <data>/wal/retired-<g:04>/shard-NN/    groups of an earlier layout, read-only

Every shard writes to shard-NN of the current layout. When the configured count differs from
LAYOUT, the supervisor retires the current groups under retired-<g> before any shard starts,
so a group directory only ever holds frames of one layout. A topic lives in exactly one group
per generation, so replaying generations oldest first keeps every topic's frames in order.
Always using shard-NN (also for one shard) is a deliberate departure from the flat layout of
the reference server: one code path, and a layout change never mixes two runs in one dir.

Checkpoints name a group by its canonical key "<generation:04>/shard-NN", which does not
change when the group is retired, so a position is never applied to another group.
"""

from __future__ import annotations

import os
import re

import orjson

from topics_actors.storage import failpoint
from topics_actors.storage.fs import Fs

WAL_FILE_RE = re.compile(r"^wal-(\d{16})\.log$")
PRE_SUFFIX = ".pre"
_RETIRED_RE = re.compile(r"^retired-(\d{4})$")
_SHARD_RE = re.compile(r"^shard-(\d{2})$")


def wal_root(data_dir: str) -> str:
    return os.path.join(data_dir, "wal")


def group_dir(data_dir: str, shard: int) -> str:
    return os.path.join(wal_root(data_dir), f"shard-{shard:02d}")


def wal_file_name(idx: int) -> str:
    return f"wal-{idx:016d}.log"


def list_wal_files(fs: Fs, directory: str) -> list[tuple[int, str]]:
    """(idx, path) of the WAL files of one group, oldest first."""
    if not fs.is_dir(directory):
        return []
    found = []
    for name in fs.listdir(directory):
        match = WAL_FILE_RE.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


def read_layout(fs: Fs, data_dir: str) -> dict | None:
    path = os.path.join(wal_root(data_dir), "LAYOUT")
    if not fs.exists(path):
        return None
    handle = fs.open_read(path)
    try:
        return orjson.loads(handle.read_at(4096, 0))
    finally:
        handle.close()


def _write_layout(fs: Fs, data_dir: str, shards: int, generation: int) -> None:
    root = wal_root(data_dir)
    tmp = os.path.join(root, "LAYOUT.tmp")
    handle = fs.open(tmp, create=True, truncate=True)
    try:
        handle.write_all_at(orjson.dumps({"shards": shards, "generation": generation}), 0)
        handle.sync_all()
    finally:
        handle.close()
    failpoint.hit("layout::before_rename")
    fs.rename(tmp, os.path.join(root, "LAYOUT"))
    fs.sync_dir(root)


def prepare_layout(fs: Fs, data_dir: str, shards: int) -> int:
    """Make the on-disk layout match `shards`, retiring the old groups if it changed.

    Idempotent and crash-safe: LAYOUT is rewritten last, so a crash midway is finished by the
    next call, and a generation number is never reused for a retired directory.
    Returns the layout generation now in force.
    """
    root = wal_root(data_dir)
    if not fs.is_dir(root):
        fs.makedirs(root)
        fs.sync_dir(data_dir)
    layout = read_layout(fs, data_dir)
    retired = [int(m.group(1)) for m in map(_RETIRED_RE.match, fs.listdir(root)) if m]
    # A crash midway through a retirement leaves LAYOUT at the retiring generation: finish
    # it into the same retired-<g>, so every group keeps the generation that wrote it.
    generation = (layout["generation"] if layout
                  else max([1] + [g + 1 for g in retired]))
    if layout is not None and layout["shards"] != shards:
        _retire(fs, root, generation)
        generation += 1
    if layout is None or layout != {"shards": shards, "generation": generation}:
        _write_layout(fs, data_dir, shards, generation)
    for shard in range(shards):
        fs.makedirs(group_dir(data_dir, shard))
    fs.sync_dir(root)
    return generation


def _retire(fs: Fs, root: str, generation: int) -> None:
    retired = os.path.join(root, f"retired-{generation:04d}")
    fs.makedirs(retired)
    for name in fs.listdir(root):
        if _SHARD_RE.match(name):
            fs.rename(os.path.join(root, name), os.path.join(retired, name))
            failpoint.hit("layout::mid_retire")
    fs.sync_dir(retired)
    fs.sync_dir(root)


def layout_generation(fs: Fs, data_dir: str) -> int:
    layout = read_layout(fs, data_dir)
    return layout["generation"] if layout else 1


def group_key(generation: int, shard_dir_name: str) -> str:
    return f"{generation:04d}/{shard_dir_name}"


def shard_key(generation: int, shard: int) -> str:
    """The canonical key of shard `shard`'s group in layout `generation`."""
    return group_key(generation, f"shard-{shard:02d}")


def key_generation(key: str) -> int:
    return int(key[:4])


def key_shard(key: str) -> int:
    return int(key.rsplit("-", 1)[1])


def retired_groups(fs: Fs, data_dir: str) -> list[tuple[str, str]]:
    """(key, dir) of every retired group, oldest generation first."""
    root = wal_root(data_dir)
    groups: list[tuple[str, str]] = []
    if not fs.is_dir(root):
        return groups
    for name in fs.listdir(root):
        match = _RETIRED_RE.match(name)
        if match:
            gen_dir = os.path.join(root, name)
            try:
                subs = fs.listdir(gen_dir)
            except FileNotFoundError:   # removed by the compactor meanwhile
                continue
            groups += [(group_key(int(match.group(1)), sub), os.path.join(gen_dir, sub))
                       for sub in subs if _SHARD_RE.match(sub)]
    return groups


def replay_groups(fs: Fs, data_dir: str, shard: int) -> list[tuple[str, str]]:
    """(key, dir) of every group a shard must read, in replay order: retired generations
    oldest first (every group of each, since topics moved), then its own current group."""
    own = (shard_key(layout_generation(fs, data_dir), shard), group_dir(data_dir, shard))
    return retired_groups(fs, data_dir) + [own]
