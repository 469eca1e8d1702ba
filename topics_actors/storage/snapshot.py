"""Snapshot files: the checkpoint the compactor writes and every shard recovers from.

    <data>/meta/snapshot-<id:016>.bin      newest valid one wins
    <data>/meta/snapshot-<id:016>.bin.tmp  being written; never loaded

    off size field
     0   4  magic     "SNP1"
     4   4  version   u32 = 4 (msgpack body; the reference server's version 3 is postcard)
     8   4  body_len  u32
    12   8  xxh3_64(body)
    20      body      msgpack map (see docs/DURABILITY.md)

A snapshot holds metadata and positions, never payloads: per WAL group the position up to
which everything is absorbed, and per topic its config, head, floors, counters, recent
idempotency keys and the segments that hold its records. A file failing any header check
or its checksum is skipped for the previous one; with none left, recovery replays the WAL.
"""

from __future__ import annotations

import logging
import os
import re
import struct

import msgpack
import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint
from topics_actors.storage.fs import Fs

log = logging.getLogger(__name__)

MAGIC = b"SNP1"
SNAPSHOT_VERSION = 4
HEADER = struct.Struct("<4sIIQ")
HEADER_BYTES = HEADER.size     # 20
BODY_BYTES_MAX = 1 << 31
BODY_KEYS = ("id", "positions", "retired_done", "next_dir", "topics")   # what recovery reads
_NAME_RE = re.compile(r"snapshot-(\d{16})\.bin")


def meta_dir(data_dir: str) -> str:
    return os.path.join(data_dir, "meta")


def snapshot_path(data_dir: str, snap_id: int) -> str:
    return os.path.join(meta_dir(data_dir), f"snapshot-{snap_id:016d}.bin")


def encode_snapshot(body: dict) -> bytes:
    raw = msgpack.packb(body, use_bin_type=True)
    return HEADER.pack(MAGIC, SNAPSHOT_VERSION, len(raw), xxhash.xxh3_64_intdigest(raw)) + raw


def decode_snapshot(data: bytes) -> dict:
    """The body of a snapshot file; CorruptionError says which check failed."""
    if len(data) < HEADER_BYTES:
        raise CorruptionError(f"short header ({len(data)} bytes)")
    magic, version, body_len, checksum = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(f"bad magic {magic!r}")
    if version != SNAPSHOT_VERSION:
        raise CorruptionError(f"unsupported version {version}")
    if body_len > BODY_BYTES_MAX or HEADER_BYTES + body_len != len(data):
        raise CorruptionError(f"body_len {body_len} does not match the file "
                              f"({len(data) - HEADER_BYTES} bytes)")
    body = memoryview(data)[HEADER_BYTES:]
    if xxhash.xxh3_64_intdigest(body) != checksum:
        raise CorruptionError("checksum mismatch")
    try:
        decoded = msgpack.unpackb(body, raw=False, strict_map_key=False, use_list=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptionError(f"body does not decode: {exc}") from None
    if not isinstance(decoded, dict):
        raise CorruptionError("body is not a map")
    return decoded


def list_snapshots(fs: Fs, data_dir: str) -> list[tuple[int, str]]:
    """(id, path) of every snapshot file, newest first."""
    directory = meta_dir(data_dir)
    if not fs.is_dir(directory):
        return []
    found = [(int(m.group(1)), os.path.join(directory, m.group(0)))
             for m in map(_NAME_RE.fullmatch, fs.listdir(directory)) if m]
    return sorted(found, reverse=True)


def read_file(fs: Fs, path: str) -> bytes:
    handle = fs.open_read(path)
    try:
        size = handle.size()
        return handle.read_at(size, 0)
    finally:
        handle.close()


def load_newest(fs: Fs, data_dir: str,
                required: tuple[str, ...] = ()) -> tuple[int, dict] | None:
    """(id, body) of the newest snapshot that passes every check, or None. A body lacking
    one of the `required` keys counts as bad: recovery could not use it."""
    for snap_id, path in list_snapshots(fs, data_dir):
        try:
            body = decode_snapshot(read_file(fs, path))
            missing = [key for key in required if key not in body]
            if missing:
                raise CorruptionError(f"body lacks {', '.join(missing)}")
            return snap_id, body
        except CorruptionError as error:
            log.warning("event=snapshot_skipped path=%s reason=%r", path, error.message)
    return None


def write_snapshot(fs: Fs, data_dir: str, snap_id: int, body: dict) -> str:
    """Write snapshot `snap_id` atomically: tmp, fsync, rename, fsync meta/. When this
    returns the snapshot is durable; a crash before that leaves the previous one in force."""
    directory = meta_dir(data_dir)
    if not fs.is_dir(directory):
        fs.makedirs(directory)
        fs.sync_dir(data_dir)
    path = snapshot_path(data_dir, snap_id)
    tmp = path + ".tmp"
    handle = fs.open(tmp, create=True, truncate=True)
    try:
        handle.write_all_at(encode_snapshot(body), 0)
        handle.sync_all()
    finally:
        handle.close()
    failpoint.hit("snapshot::before_rename")
    fs.rename(tmp, path)
    failpoint.hit("snapshot::after_rename")
    fs.sync_dir(directory)
    return path


def prune(fs: Fs, data_dir: str, keep_id: int) -> int:
    """Remove every snapshot older than `keep_id` and stray .tmp files; returns the count."""
    failpoint.hit("snapshot::before_prune")
    removed = 0
    directory = meta_dir(data_dir)
    for name in fs.listdir(directory):
        match = _NAME_RE.fullmatch(name)
        stale = (match and int(match.group(1)) < keep_id) or name.endswith(".bin.tmp")
        if stale:
            try:
                fs.remove(os.path.join(directory, name))
                removed += 1
            except FileNotFoundError:
                pass
    return removed
