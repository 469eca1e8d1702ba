"""fsck of the WAL: every file of every group (current and retired) decodes frame by frame up
to its log end, and what follows is zeros or a torn tail, not damage with frames after it;
no file a usable snapshot replays from is missing; each snapshot position names a frame
boundary."""

from __future__ import annotations

import dataclasses
import os

from topics_actors.fsck.report import ERROR, WARNING
from topics_actors.fsck.scan import Check, text_len
from topics_actors.storage.frame import decode_at
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_layout import wal_file_name
from topics_actors.storage.wal_damage import damage_at

_TYPE_NAMES = {int(t): t.name for t in FrameType}


@dataclasses.dataclass
class WalFile:
    rel: str
    size: int = 0
    valid_len: int = 0
    hits: set[int] = dataclasses.field(default_factory=set)   # wanted offsets on a boundary


class WalCheck(Check):
    def __init__(self, scan):
        super().__init__(scan)
        self.files: dict[tuple[str, int], WalFile | None] = {}   # None: vanished

    def run(self) -> None:
        wanted: dict[tuple[str, int], set[int]] = {}
        for _, _, body in self.scan.valid[:2]:
            for key, (idx, offset) in body["positions"].items():
                wanted.setdefault((key, idx), set()).add(offset)
        for key, directory, files in self.scan.groups:
            self.report.wal_groups += 1
            self.check_continuity(key, directory, [idx for idx, _, _ in files])
            for n, (idx, path, size) in enumerate(files):
                base = self.progress.done
                self.files[(key, idx)] = self.check_file(
                    path, n == len(files) - 1, wanted.get((key, idx), set()), base)
                self.progress.set(base + size)

    def check_continuity(self, key: str, directory: str, present: list[int]) -> None:
        """Every file from the lowest one a usable snapshot replays from must be there."""
        usable = self.scan.valid[:2]
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

    def check_file(self, path: str, last: bool, wanted: set[int], base: int) -> WalFile | None:
        data = self.read(path)
        if data is None:
            return None
        wal, report = WalFile(self.rel(path), len(data)), self.report
        report.wal_files += 1
        report.wal_bytes += len(data)
        offset, size, by_type = 0, len(data), report.frames_by_type
        dump_out, progress_every = self.scan.dump_out, self.scan.progress_every
        while True:
            if offset in wanted:
                wal.hits.add(offset)
            frame = decode_at(data, offset, size)
            if frame is None:
                break
            report.frames += 1
            name = _TYPE_NAMES[frame.type]    # decode_at admits known types only
            by_type[name] = by_type.get(name, 0) + 1
            if dump_out is not None:
                print(f"{wal.rel}@{offset} {name} tid={frame.topic_id:016x} seq={frame.seq} "
                      f"ts={frame.ts} data={len(frame.data)} node={text_len(frame.node)} "
                      f"tag={text_len(frame.tag)} size={frame.size} flags={frame.flags:#x}",
                      file=dump_out)
            offset += frame.size
            if report.frames % progress_every == 0:
                self.progress.set(base + offset)
        wal.valid_len = offset
        self.check_end(wal, data, last)
        return wal

    def check_end(self, wal: WalFile, data: bytes, last: bool) -> None:
        """Classify what follows the log as recovery does (storage/wal_damage.py): zeros (a
        clean end), a torn tail, or damage inside the log (valid frames follow it)."""
        offset, size = wal.valid_len, len(data)
        data_end = len(data.rstrip(b"\x00"))     # one past the last non-zero byte
        if data_end <= offset:
            return
        damage = damage_at(data, offset, size, last)
        reason = damage.reason if damage is not None else \
            f"torn: zeros, then data up to offset {data_end}"
        if damage is not None and damage.kind == "mid":
            self.problem(ERROR, wal.rel, f"corruption inside the file ({reason}): valid "
                         f"frames follow at offset {damage.resume}; recovery quarantines "
                         "the topics it concerns", offset)
        elif last:
            self.problem(WARNING, wal.rel, f"torn tail ({reason}); recovery ignores the "
                         f"{data_end - offset} bytes after the log end", offset)
        else:
            self.problem(WARNING, wal.rel, f"log ends early ({reason}); no valid frame "
                         "follows in this file", offset)

    def check_positions(self, snap_id: int, snap_rel: str, body: dict, fallback: bool) -> None:
        """A position must name an existing WAL file and a frame boundary inside its log."""
        known = {key: directory for key, directory, _ in self.scan.groups}
        role = f"snapshot {snap_id}" + (" (the fallback)" if fallback else "")
        for key, (idx, offset) in sorted(body["positions"].items()):
            if (idx, offset) == (0, 0) or key in body["retired_done"]:
                continue           # nothing absorbed, or a retired group it no longer needs
            if key not in known:
                self.problem(ERROR, snap_rel, f"position ({idx}, {offset}) of WAL group {key} "
                             "but the group does not exist")
                continue
            if (key, idx) not in self.files:
                path = os.path.join(known[key], wal_file_name(idx))
                self.problem(ERROR, self.rel(path),
                             f"missing, but {role} resumes group {key} in it at {offset}")
                continue
            wal = self.files[(key, idx)]
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
