"""fsck of the segments: every segment the newest valid snapshot lists is there in its tier,
its .idx and .data agree with the snapshot and with each other record by record, and the
topic's segments neither overlap nor pass its absorbed seq; the previous snapshot's segments
exist (a fallback needs them); segment files neither snapshot lists are orphans."""

from __future__ import annotations

import os
import re

from topics_actors.errors import CorruptionError
from topics_actors.fsck.report import ERROR, WARNING
from topics_actors.fsck.scan import Check, text_len
from topics_actors.storage import segment_batch
from topics_actors.storage.segment import (
    DEL_DELETED, DEL_LIVE, FLAG_BATCH, IDX_ENTRY, IDX_ENTRY_BYTES, SEGMENT_FLAGS,
    batch_record, decode_frame, segment_stem,
)

_FRAME_AT_RE = re.compile(r"^frame at offset \d+: ")


class SegmentCheck(Check):
    def run(self) -> None:
        listed: set[str] = set()
        for n, (snap_id, snap_rel, body) in enumerate(self.scan.valid[:2]):
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
        sizes = self.scan.segment_sizes
        hot = os.path.join(directory, segment_stem(first))
        cold_dir = self.scan.tiers.cold_of(directory)
        if cold_dir is None:
            return [hot]
        cold = os.path.join(cold_dir, segment_stem(first))
        cold_only = hot + ".data" not in sizes and cold + ".data" in sizes
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
            if path not in self.scan.segment_sizes:
                self.problem(WARNING, self.rel(path), f"missing: listed by snapshot {snap_id}, "
                             "so a fallback to it would fail")

    def check_segment(self, entry: dict, stem: str, first: int, count: int, data_len: int,
                      is_open: bool) -> None:
        report, data_path, idx_path = self.report, stem + ".data", stem + ".idx"
        sizes = self.scan.segment_sizes
        report.segments += 1
        base = self.progress.done
        planned = sizes.get(data_path, 0) + sizes.get(idx_path, 0)
        parts = []
        for path in (data_path, idx_path):
            if path not in sizes:
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
        dump_out, progress_every = self.scan.dump_out, self.scan.progress_every
        limit, expected, batch = min(len(data), data_len), 0, None
        for i in range(min(count, len(idx) // IDX_ENTRY_BYTES)):
            seq = first + i
            offset, length, ts, flags = IDX_ENTRY.unpack_from(idx, i * IDX_ENTRY_BYTES)
            in_batch = batch is not None and offset == batch.offset  # its frame's next record
            if offset != expected and not in_batch:
                self.problem(ERROR, self.rel(idx_path), f"entry points at .data offset "
                             f"{offset}, expected {expected} (segments are dense)",
                             i * IDX_ENTRY_BYTES, seq)
            expected = offset + length
            if offset + length > limit:
                self.problem(ERROR, data_rel, f".idx entry (len {length}) points past the "
                             f"end of the data ({limit} bytes)", offset, seq)
                continue
            try:
                if flags & FLAG_BATCH:
                    if not in_batch:
                        batch = segment_batch.decode(data, offset, limit)
                    expected = offset + batch.total
                    record = batch_record(data, batch, length, seq)
                else:
                    batch, record = None, decode_frame(data, offset, offset + length)
            except CorruptionError as error:
                batch = None
                self.problem(ERROR, data_rel, _FRAME_AT_RE.sub("", error.message), offset, seq)
                continue
            report.records += 1
            reason = record_problem(record, data, offset, length, seq, ts, flags)
            if reason:
                self.problem(ERROR, data_rel, reason, offset, seq)
            elif data[offset + length - 1] not in (DEL_LIVE, DEL_DELETED):
                self.problem(WARNING, data_rel, f"del byte {data[offset + length - 1]:#04x} "
                             "is neither live nor deleted (reads as live)", offset, seq)
            report.deleted_records += record.deleted
            if dump_out is not None:
                print(f"{data_rel}@{offset} RECORD tid={entry['tid']:016x} seq={record.seq} "
                      f"ts={record.ts} data={len(record.envelope)} node={text_len(record.node)} "
                      f"tag={text_len(record.tag)} size={length}"
                      + (" deleted" if record.deleted else ""), file=dump_out)
            if report.records % progress_every == 0:
                self.progress.set(base + offset)

    def check_orphans(self, listed: set[str]) -> None:
        """Segment files no decodable snapshot lists: a crashed compactor's leftovers or a
        dropped segment (the reclaimer sweeps them), or one a live compactor is writing."""
        sizes = self.scan.segment_sizes
        stems: dict[str, list[str]] = {}
        for path in sizes:
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
                sizes[f"{stem}.{part}"] for part in parts))


def record_problem(record, data: bytes, offset: int, length: int, seq: int, ts: int,
                   flags: int) -> str | None:
    """How a segment record disagrees with its .idx entry or its place, or None (a batch
    frame's record: its length was checked against the frame when it was read)."""
    frame_len = int.from_bytes(data[offset:offset + 4], "little")
    if frame_len + 4 != length and not flags & FLAG_BATCH:
        return f".idx entry says {length} bytes, the frame is {frame_len + 4}"
    flags &= SEGMENT_FLAGS
    if record.seq != seq:
        return f"the frame holds seq {record.seq}"
    if (record.ts, record.flags) != (ts, flags):
        return (f".idx entry (ts {ts}, flags {flags:#x}) disagrees with the frame "
                f"(ts {record.ts}, flags {record.flags:#x})")
    return None
