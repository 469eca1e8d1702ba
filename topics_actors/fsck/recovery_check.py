"""fsck of what recovery would quarantine: each shard of the layout, as its recovery reads the
log (the newest valid snapshot, its segments, then its WAL groups from their positions),
through the same TopicLedger and RecoveryAudit (ledger/recovery_audit.py), so fsck and a
restarted node name the same topics, reasons, first bad seqs and losses.

Each finding is an error (`report.quarantine` holds them as the node's GET /v0/quarantine
shows them, with the shard); a torn tail is already a warning of the WAL check.
"""

from __future__ import annotations

import time

from topics_actors.fsck.report import ERROR
from topics_actors.fsck.scan import Check
from topics_actors.ledger.recovery_audit import RecoveryAudit, wal_plan
from topics_actors.ledger.topic_ledger import TopicLedger
from topics_actors.storage.segment import topic_dir
from topics_actors.storage.wal_layout import read_layout
from topics_actors.topic_identity import shard_of

CHUNK_FRAMES = 4096


class RecoveryCheck(Check):
    def run(self) -> None:
        try:
            layout = read_layout(self.scan.fs, self.data_dir)
            shards = int(layout["shards"]) if layout is not None else 1
        except (OSError, ValueError, KeyError, TypeError):
            return     # the WAL check reported the unreadable LAYOUT; recovery would fail
        for shard in range(shards):
            try:
                audit = self.audit_shard(shard, shards)
            except (OSError, ValueError, KeyError, TypeError) as error:
                self.problem(ERROR, ".", f"shard {shard}: the recovery check could not run: "
                             f"{error}")
                continue
            for verdict in audit.verdicts():
                self.report.quarantine.append({"shard": shard, **verdict})
                self.problem(ERROR, verdict["where"].rsplit("@", 1)[0],
                             f"recovery quarantines topic {verdict['topic']!r}: "
                             f"{verdict['reason']}; first bad seq {verdict['first_bad_seq']}, "
                             f"a repair loses {verdict['would_lose']['records']} records"
                             + (" or more" if verdict["would_lose"]["more_unknown"] else ""),
                             _offset(verdict["where"]), verdict["first_bad_seq"])

    def audit_shard(self, shard: int, shards: int) -> RecoveryAudit:
        fs = self.scan.fs
        ledger = TopicLedger(time.time_ns() // 1_000_000,
                             lambda tid: shard_of(tid, shards) == shard)
        audit = RecoveryAudit(self.data_dir)
        ledger.audit, ledger.frozen = audit, audit.frozen
        positions, done = {}, set()
        if self.scan.valid:
            _, _, body = self.scan.valid[0]
            positions, done = body["positions"], set(body["retired_done"])
            for entry in body["topics"]:
                if ledger.owns(entry["tid"]):
                    directory = topic_dir(self.data_dir, entry["dir"])
                    topic = ledger.restore_entry(entry, directory)
                    audit.check_segments(self._read, topic, entry["segments"], directory,
                                         lambda d, first: self.scan.tiers.resolve(fs, d, first))
        for _, own, _, path, last, start, end in wal_plan(fs, self.data_dir, shard,
                                                          positions, done):
            data = self._read(path)
            scan = audit.scan_file(ledger, data, path, start, min(end, len(data)),
                                   CHUNK_FRAMES, own, last)
            for _ in scan:
                pass
        return audit

    def _read(self, path: str) -> bytes:
        """A whole file by pread (never mapped: a running server may cut a WAL file)."""
        handle = self.scan.fs.open_read(path)
        try:
            return handle.read_at(handle.size(), 0)
        finally:
            handle.close()


def _offset(where: str) -> int | None:
    _, _, offset = where.rpartition("@")
    return int(offset) if offset.isdigit() else None

