"""fsck of the snapshot files: each must decode into a body recovery can use; the valid ones,
newest first, are what the WAL and segment checks measure the data dir against."""

from __future__ import annotations

from topics_actors.errors import CorruptionError
from topics_actors.fsck.report import ERROR, WARNING, Problem, SnapshotInfo
from topics_actors.fsck.scan import Check
from topics_actors.storage.snapshot import decode_snapshot

_TOPIC_KEYS = ("name", "tid", "dir", "segments", "absorbed")


class SnapshotCheck(Check):
    def run(self) -> None:
        """Fill scan.valid; a bad snapshot says which one recovery uses instead."""
        bad: list[tuple[int, Problem]] = []
        for snap_id, path, size in self.scan.snapshot_files:
            rel, raw = self.rel(path), self.read(path)
            self.progress.set(self.progress.done + size)
            if raw is None:
                continue
            try:
                body = decode_snapshot(raw)
                reason = body_problem(body)
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
            self.scan.valid.append((snap_id, rel, body))
        newest = self.scan.valid[0][0] if self.scan.valid else None
        self.report.newest_snapshot = newest
        for snap_id, problem in bad:
            if newest is None:
                problem.reason += "; no valid snapshot: recovery replays the whole WAL"
            elif snap_id > newest:
                problem.reason += f"; recovery uses snapshot {newest} instead"


def body_problem(body: dict) -> str | None:
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
