"""The shard's quarantined topics: the recovery policy applied once, the refusal of their
requests, and their repair.

Recovery (replay.py) hands over its RecoveryAudit (ledger/recovery_audit.py). The policy
(TOPICS_RECOVERY_ON_MISMATCH) decides, here and nowhere else:

- `park` (default): each topic the audit found answers `quarantined` (503) to every request
  naming it; the shard serves its other topics;
- `refuse`: the same, and the node's readiness answers 503 while any topic is quarantined;
- `ignore`: every repairable topic is repaired at once, with a WARNING line each.

A repair cuts the log back to the topic's last valid record on disk, then syncs: the WAL
frames from its first bad one on (and the damaged bytes) become filler frames of the same
length, each faulty segment record is fixed in place. The
topic's state in memory already is that valid prefix (recovery stopped applying its frames
there), so it serves at once, and a restart finds a clean log.

While any topic is quarantined, checkpoint barriers are refused: a snapshot past the damage
would absorb the valid prefix and forget the quarantine, healing it silently.

Segments are checked after the shard is ready, a slice at a time between its turns
(audit_segments), so reading every segment's bytes never delays readiness. That is safe:
reads check every segment record anyway (a damaged one is an error, never served), and a
segment repair fixes the segment in place without cutting the topic, so records written
meanwhile are untouched.
"""

from __future__ import annotations

import collections
import logging
import os
import time

from topics_actors.config import RECOVERY_POLICY_DEFAULT, RecoveryPolicy
from topics_actors.errors import CorruptionError, ErrorCode, TopicsError, quarantined
from topics_actors.ledger.recovery_audit import Quarantine, RecoveryAudit
from topics_actors.storage import failpoint, segment_audit
from topics_actors.storage.fs import Fs
from topics_actors.storage.wal_damage import filler

log = logging.getLogger(__name__)



class QuarantineBook:
    def __init__(self, fs: Fs, shard: int, policy: RecoveryPolicy = RECOVERY_POLICY_DEFAULT,
                 data_dir: str = ""):
        self.policy = RecoveryPolicy(policy)      # ValueError: not one of the policies
        self.fs, self.shard, self.data_dir = fs, shard, data_dir
        self.topics: dict[str, Quarantine] = {}
        self.total = 0           # quarantines found since the process started
        self.repaired = 0
        # Segments still to check: (tid, [first, count, data_len], topic directory).
        self.unaudited: collections.deque[tuple[int, list, str]] = collections.deque()

    def take(self, audit: RecoveryAudit) -> None:
        """Apply the policy to what recovery (or the segment check) found."""
        for found in audit.quarantined.values():
            log.error("event=quarantined shard=%d topic=%s first_bad_seq=%d where=%s "
                      "would_lose=%d reason=%r policy=%s", self.shard, found.topic,
                      found.first_bad_seq, found.where, found.lost_records, found.reason,
                      self.policy)
            known = self.topics.get(found.topic)
            if known is None:
                self.total += 1
                self.topics[found.topic] = found
            else:                # the same topic, found again by the segment check
                known.first_bad_seq = min(known.first_bad_seq, found.first_bad_seq)
                known.lost_records += found.lost_records
                known.segment_faults += found.segment_faults
        if self.policy is RecoveryPolicy.IGNORE:
            for name in [q.topic for q in audit.quarantined.values()]:
                self._ignore(name)

    # --- the segment check --------------------------------------------------------------------

    def queue_segments(self, tid: int, segments: list, directory: str) -> None:
        self.unaudited.extend((tid, segment, directory) for segment in segments)

    def audit_segments(self, registry, read, locate, budget_ms: float | None) -> None:
        """Check queued segments for up to `budget_ms` (None: all). A segment its topic no
        longer lists (deleted, retained away) is skipped."""
        deadline = None if budget_ms is None else time.monotonic() + budget_ms / 1000
        audit = RecoveryAudit(self.data_dir)
        while self.unaudited and (deadline is None or time.monotonic() < deadline):
            tid, segment, directory = self.unaudited.popleft()
            topic = registry.by_tid.get(tid)
            if topic is None or topic.seg_dir != directory or segment[0] not in topic.seg_firsts:
                continue
            audit.check_segments(read, topic, [segment], directory, locate)
        if audit.quarantined:
            self.take(audit)

    def _ignore(self, name: str) -> None:
        found = self.topics[name]
        if not found.repairable:
            log.error("event=quarantine_kept shard=%d topic=%s reason=%r: no automatic repair",
                      self.shard, name, found.reason)
            return
        try:
            self.repair(name)
        except (OSError, TopicsError) as error:   # the topic stays quarantined, the shard on
            log.error("event=quarantine_kept shard=%d topic=%s error=%r", self.shard, name,
                      error)
            return
        log.warning("event=recovery_truncated shard=%d topic=%s first_bad_seq=%d lost=%d "
                    "reason=%r (TOPICS_RECOVERY_ON_MISMATCH=ignore)", self.shard, name,
                    found.first_bad_seq, found.lost_records, found.reason)

    # --- serving ------------------------------------------------------------------------------

    def check(self, name: str) -> None:
        found = self.topics.get(name)
        if found is not None:
            raise quarantined(name, found.reason)

    def check_checkpoint(self) -> None:
        if self.topics:
            raise TopicsError(f"shard {self.shard} has quarantined topics "
                              f"({', '.join(sorted(self.topics))}): checkpoints wait for "
                              "their repair", ErrorCode.QUARANTINED,
                              {"quarantined": sorted(self.topics)})

    def status(self) -> dict:
        return {"recovery_policy": self.policy, "quarantines_total": self.total,
                "quarantine": [q.to_wire() for _, q in sorted(self.topics.items())],
                "segments_unaudited": len(self.unaudited)}

    # --- repair -------------------------------------------------------------------------------

    def repair(self, name: str) -> dict:
        found = self.topics.get(name)
        if found is None:
            raise TopicsError(f"topic {name!r} is not quarantined", ErrorCode.NOT_FOUND,
                              {"topic": name})
        if not found.repairable:
            raise CorruptionError(f"topic {name!r} has damage without an automatic repair "
                                  f"({found.reason}): restore it from a backup",
                                  detail={"topic": name, "first_bad_seq": found.first_bad_seq})
        for data_path, idx_path, first, faults in found.segment_faults:
            segment_audit.repair(self.fs, data_path, idx_path, first, faults)
        self._fill_wal(found.wal_fills)
        del self.topics[name]
        self.repaired += 1
        log.warning("event=repaired shard=%d topic=%s first_bad_seq=%d lost_records=%d",
                    self.shard, name, found.first_bad_seq, found.lost_records)
        return {"topic": name, "repaired": True, "lost_records": found.lost_records,
                "first_bad_seq": found.first_bad_seq}

    def _fill_wal(self, fills: list[tuple[str, int, int]]) -> None:
        by_path: dict[str, list[tuple[int, int]]] = {}
        for path, offset, length in fills:
            by_path.setdefault(path, []).append((offset, length))
        for path, spans in by_path.items():
            handle = self.fs.open(path)
            try:
                for offset, length in sorted(spans):
                    handle.write_all_at(filler(length), offset)
                failpoint.hit("repair::before_sync")
                handle.sync_data()
            finally:
                handle.close()
            log.info("event=wal_filled path=%s spans=%d", os.path.basename(path), len(spans))

