"""What fsck found: the problems with their file and offset, and the counts of what it read.

An *error* is damage recovery cannot simply undo or that endangers records; a *warning* is
what recovery handles by design or what a running server can cause (see the package doc).
"""

from __future__ import annotations

import dataclasses

ERROR = "error"
WARNING = "warning"


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
    quarantine: list[dict] = dataclasses.field(default_factory=list)   # recovery_check.py

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
