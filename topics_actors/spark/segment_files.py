"""Bulk history straight from a data dir's sealed segment files, without the server.

Planning reads the newest valid snapshot (storage/snapshot.py): per topic its segments
[first_seq, count, data_len] (only those bytes are valid; a file may be longer) and its
floors. Each segment becomes one or more pieces that workers read in parallel with plain
preads, never mmap (a live compactor may rewrite a segment's tail). A segment is looked up
in the hot data dir first, then under the cold-tier dir (TOPICS_COLD_DIR) at the same
relative path.

What this reader sees is the state of the last checkpoint: records still only in the WAL
(newer than the snapshot) are not there, and deletes or evictions logged after it are not
applied yet. Records below the topic's floors and records whose del byte is set are
skipped. Every record's checksum is verified unless `verify` is off.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator

from topics_actors.errors import CorruptionError
from topics_actors.spark.offsets import OffsetSpec, resolve
from topics_actors.spark.planning import SeqWindow, split_range
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import (
    FLAG_BATCH, IDX_ENTRY_BYTES, data_path, idx_path, index_flags, index_words, span,
)
from topics_actors.storage.segment_run import Columns, decode_run
from topics_actors.storage.snapshot import BODY_KEYS, load_newest


@dataclasses.dataclass(frozen=True)
class SegmentPiece:
    """Seqs (after_seq, until_seq] of one segment of one topic."""
    topic: str
    relative_dir: str        # the topic dir, relative to the data dir (and the cold dir)
    first_seq: int
    count: int               # valid .idx entries (the snapshot's word)
    data_len: int            # valid .data bytes
    after_seq: int
    until_seq: int
    floor: int               # every seq <= floor is gone (evicted, expired or deleted)


def _floor(entry: dict) -> int:
    return max(entry.get(name, 0) for name in ("evict_floor", "expiry_floor", "delete_floor",
                                               "source_trim_floor"))


def plan_pieces(data_dir: str, topics: Iterable[str], starting: OffsetSpec,
                ending: OffsetSpec, per_piece: int,
                window: SeqWindow = SeqWindow()) -> list[SegmentPiece]:
    """Pieces of every segment the newest snapshot lists for `topics`, clipped to the
    offsets; a topic the snapshot does not know yields nothing."""
    loaded = load_newest(RealFs(), data_dir, BODY_KEYS)
    if loaded is None:
        raise FileNotFoundError(f"no valid snapshot under {data_dir}/meta: nothing is sealed")
    wanted = set(topics)
    pieces = []
    for entry in sorted(loaded[1]["topics"], key=lambda e: e["name"]):
        if entry["name"] not in wanted or not entry["dir"]:
            continue
        floor = _floor(entry)
        head = entry["head"]
        lo = resolve(starting, entry["name"], floor + 1, head, inclusive_end=False)
        hi = resolve(ending, entry["name"], floor + 1, head, inclusive_end=True)
        lo, hi = max(lo, floor, window.after_seq), min(hi, window.until_seq)
        for first, count, data_len in entry["segments"]:
            last = first + count - 1
            for rng in split_range(entry["name"], max(lo, first - 1), min(hi, last), per_piece):
                pieces.append(SegmentPiece(entry["name"], entry["dir"], first, count,
                                           data_len, rng.after_seq, rng.until_seq, floor))
    return pieces


def group_pieces(pieces: list[SegmentPiece], per_partition: int
                 ) -> list[tuple[SegmentPiece, ...]]:
    """Consecutive pieces of one topic joined while they span at most `per_partition` seqs:
    a segment holds 10k records by default, and one Spark task per segment costs more in
    task overhead than the reading does."""
    groups: list[list[SegmentPiece]] = []
    span_seqs = 0
    for piece in pieces:
        seqs = piece.until_seq - piece.after_seq
        if (groups and groups[-1][-1].topic == piece.topic
                and groups[-1][-1].until_seq == piece.after_seq
                and span_seqs + seqs <= per_partition):
            groups[-1].append(piece)
            span_seqs += seqs
        else:
            groups.append([piece])
            span_seqs = seqs
    return [tuple(group) for group in groups]


def _pread(path: str, length: int, offset: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        out = os.pread(fd, length, offset)
        while len(out) < length:
            more = os.pread(fd, length - len(out), offset + len(out))
            if not more:
                break
            out += more
        return out
    finally:
        os.close(fd)


def _locate(piece: SegmentPiece, data_dir: str, cold_dir: str | None) -> str:
    """The topic dir holding the segment: hot first, then cold."""
    for root in (data_dir, cold_dir):
        if root:
            path = os.path.join(root, piece.relative_dir)
            if os.path.exists(data_path(path, piece.first_seq)):
                return path
    raise CorruptionError(f"segment {piece.first_seq} of {piece.relative_dir} is in neither "
                          f"{data_dir} nor {cold_dir or '(no cold dir)'}")


def read_piece(piece: SegmentPiece, data_dir: str, cold_dir: str | None = None,
               verify: bool = True, chunk_seqs: int = 10_000) -> Iterator[tuple]:
    """(seqs, ts_ms, data, offsets, tags, nodes) of the live records of a piece, in the
    column layout of a `scan` reply, `chunk_seqs` seqs at a time (so Spark consumes one
    chunk while the next is decoded); chunks with no live record are not yielded."""
    path = _locate(piece, data_dir, cold_dir)
    lo = max(piece.after_seq, piece.floor) + 1
    while lo <= piece.until_seq:
        hi = min(piece.until_seq, lo + chunk_seqs - 1)
        cols = _read_chunk(piece, path, lo, hi, verify)
        if cols.tags:
            yield cols.seqs, cols.stamps, bytes(cols.data), cols.offsets, cols.tags, cols.nodes
        lo = hi + 1


def _read_chunk(piece: SegmentPiece, path: str, lo: int, hi: int, verify: bool) -> Columns:
    where = f"{path}/seg-{piece.first_seq}"
    count = hi - lo + 1
    index = _pread(idx_path(path, piece.first_seq), count * IDX_ENTRY_BYTES,
                   (lo - piece.first_seq) * IDX_ENTRY_BYTES)
    if len(index) != count * IDX_ENTRY_BYTES:
        raise CorruptionError(f"{where}: .idx is short")
    offsets, lengths = index_words(index)
    flags = index_flags(index)
    start, end = span(offsets, lengths)
    if flags[-1] & FLAG_BATCH:       # the last record's batch frame may end past its del byte
        prefix = _pread(data_path(path, piece.first_seq), 4, offsets[-1])
        if len(prefix) == 4:
            end = max(end, offsets[-1] + 4 + int.from_bytes(prefix, "little"))
    if end > piece.data_len:
        raise CorruptionError(f"{where}: .idx points past valid .data")
    view = memoryview(_pread(data_path(path, piece.first_seq), end - start, start))
    if len(view) != end - start:
        raise CorruptionError(f"{where}: .data is short")
    cols = Columns()
    decode_run(view, start, offsets, lengths, lo, cols, where, verify=verify, flags=flags)
    return cols
