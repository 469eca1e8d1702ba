"""The recovery verdict: which topics the log cannot vouch for, why, and what a repair loses.

A shard's recovery (shard/replay.py) and fsck (fsck/recovery_check.py) both read the log
through a TopicLedger with a RecoveryAudit attached, so both find the same things:

- a WAL file whose damage is a torn tail (only zeros follow) is a lost suffix: recovery cuts
  it off by itself, the audit only notes it (`tails`);
- damage inside a WAL file (frames follow it, storage/wal_damage.py):
  - when the damaged frame's header adds up, the scan resumes after it and the topic its
    header names is quarantined (a neighbour whose own frame it really was shows a gap at
    its next record, below);
  - when it does not, the scan resumes at the next valid frame, and every topic the shard
    knows at that point is quarantined (the damaged bytes cannot be attributed);
- an Append whose seq is past head + 1 (a gap) or a Lease frame for a seq past the head (a
  dangling reference) quarantines its topic;
- a segment record the snapshot vouches for that fails its checks, or an `.idx` entry that
  does not point at it in the durable `.data` (storage/segment_audit.py).

From the point where a topic is quarantined by the WAL, its later frames are not applied
(its state is the valid prefix, what a repair keeps) and they are listed as the places a
repair overwrites with filler frames; each Append among them is a record the repair loses.
A segment fault does not stop the topic's WAL frames: the repair fixes the segment in place.
"""

from __future__ import annotations

import dataclasses
import os

from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import data_path, idx_path
from topics_actors.storage.segment_audit import SegmentFault, audit
from topics_actors.storage.wal_damage import FILLER_MIN, WalDamage, damage_at
from topics_actors.storage.wal_layout import list_wal_files, replay_groups

@dataclasses.dataclass
class Quarantine:
    topic: str
    tid: int
    reason: str
    first_bad_seq: int
    where: str                              # file@offset relative to the data dir
    lost_records: int = 0                   # Appends a repair takes out of the log
    lost_unknown: bool = False              # unattributed damaged bytes may hold more
    wal_fills: list[tuple[str, int, int]] = dataclasses.field(
        default_factory=list)               # (path, offset, length) a repair overwrites
    segment_faults: list[tuple[str, str, int, list[SegmentFault]]] = dataclasses.field(
        default_factory=list)               # (data path, idx path, first seq, faults)

    @property
    def repairable(self) -> bool:
        return (all(length >= FILLER_MIN for _, _, length in self.wal_fills)
                and all(f.fix is not None for *_, faults in self.segment_faults
                        for f in faults))

    def to_wire(self) -> dict:
        return {"topic": self.topic, "reason": self.reason, "first_bad_seq": self.first_bad_seq,
                "where": self.where, "repairable": self.repairable,
                "would_lose": {"records": self.lost_records, "more_unknown": self.lost_unknown}}


class RecoveryAudit:
    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        self.quarantined: dict[int, Quarantine] = {}
        self.frozen: dict[int, Quarantine] = {}     # WAL frames of these are not applied
        self.tails: list[str] = []                  # torn tails cut off: notes only
        self.path = ""                              # the WAL file being read

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.data_dir).replace(os.sep, "/")

    # --- findings -----------------------------------------------------------------------------

    def quarantine(self, topic: TopicState, reason: str, first_bad_seq: int, where: str,
                   freeze: bool) -> Quarantine:
        found = self.quarantined.get(topic.tid)
        if found is None:
            found = self.quarantined[topic.tid] = Quarantine(
                topic.name, topic.tid, reason, first_bad_seq, where)
        found.first_bad_seq = min(found.first_bad_seq, first_bad_seq)
        if freeze:
            self.frozen[topic.tid] = found
        return found

    def mismatch(self, topic: TopicState, reason: str, offset: int, size: int,
                 records: int) -> None:
        """A frame the topic's state cannot take (a gap, a dangling reference): the topic
        stops here; this frame, holding `records` records, is the first a repair takes
        out."""
        found = self.quarantine(topic, reason, topic.head + 1,
                                f"{self.rel(self.path)}@{offset}", freeze=True)
        self.skipped(found, offset, size, records)

    def skipped(self, found: Quarantine, offset: int, size: int, records: int) -> None:
        found.wal_fills.append((self.path, offset, size))
        found.lost_records += records

    def forget(self, tid: int) -> None:
        """The topic was deleted after its damage (a segment fault): nothing is left to
        repair, and a topic created again under the name starts clean."""
        self.quarantined.pop(tid, None)

    def damaged(self, damage: WalDamage, ledger, own: bool) -> None:
        where = f"{self.rel(self.path)}@{damage.offset}"
        named = None
        if damage.topic_id is not None:
            if not own and not ledger.owns(damage.topic_id):
                return   # another shard's frame in a retired group: its owner quarantines it
            named = ledger.by_tid.get(damage.topic_id) if ledger.owns(damage.topic_id) else None
        if named is not None:
            found = self.quarantine(named, f"WAL frame fails its checks ({damage.reason})",
                                    named.head + 1, where, freeze=True)
            found.wal_fills.append((self.path, damage.offset, damage.length))
            found.lost_records += damage.frame_type == FrameType.APPEND
            # a damaged batch's count cannot be trusted
            found.lost_unknown |= damage.frame_type == FrameType.APPEND_BATCH
            return
        reason = f"WAL damage ({damage.reason}); the frames after it cannot be attributed"
        for topic in list(ledger.by_tid.values()):
            if ledger.owns(topic.tid):
                found = self.quarantine(topic, reason, topic.head + 1, where, freeze=True)
                found.wal_fills.append((self.path, damage.offset, damage.length))
                found.lost_unknown = True

    def check_segments(self, read, topic: TopicState, segments: list, directory: str,
                       locate) -> None:
        """Audit a topic's segments as the snapshot lists them ([first, count, data_len]);
        `read(path)` gives a file's bytes (a mapping will do), `locate(dir, first)` the
        directory of the tier that holds the segment."""
        for first, count, data_len in segments:
            views, paths = _open_segment(read, locate, directory, first)
            if views is None:
                found = self.quarantine(topic, "segment is missing", first,
                                        self.rel(paths[0]), freeze=False)
                found.segment_faults.append((*paths, first, [SegmentFault(
                    first, "segment is missing", None, 0, 0, 0, 0)]))
                found.lost_records += count
                continue
            try:
                faults = audit(views[0], views[1], first, count, data_len)
            finally:
                _close(views)
            if faults:
                found = self.quarantine(topic, f"segment seq {faults[0].seq}: "
                                        f"{faults[0].reason}", faults[0].seq,
                                        f"{self.rel(paths[0])}@{faults[0].offset}",
                                        freeze=False)
                found.segment_faults.append((*paths, first, faults))
                found.lost_records += sum(f.fix != "idx" for f in faults)

    # --- one WAL file -------------------------------------------------------------------------

    def scan_file(self, ledger, view, path: str, start: int, end: int, chunk_frames: int,
                  own: bool = True, last: bool = False):
        """Apply a file's frames from `start`, past damage inside the log. `own`: the file is
        of the shard's own group, which holds only its topics' frames (a damaged header
        naming another topic is damaged there too); `last`: the last file of its group (it
        may end in an unsynced tail, storage/wal_damage.py). Yields the offset reached now
        and then; returns where the file's log ends (a torn tail starts there)."""
        self.path, offset = path, start
        while True:
            reached, ended = ledger.scan(view, offset, end, chunk_frames)
            offset = reached
            yield offset
            if not ended:
                continue
            damage = damage_at(view, offset, end, last) if offset < end else None
            if damage is None:
                return offset
            if damage.kind == "torn":
                self.tails.append(f"{self.rel(path)}@{offset}: {damage.reason}")
                return offset
            self.damaged(damage, ledger, own)
            offset = damage.resume

    def verdicts(self) -> list[dict]:
        return [q.to_wire() for q in sorted(self.quarantined.values(), key=lambda q: q.topic)]


def _open_segment(read, locate, directory: str, first: int) -> tuple:
    """(views of .data and .idx, their paths); views None when the segment is in no tier.
    Looked up twice: the reclaimer may move it to the cold tier between look and read."""
    for _ in range(2):
        found_dir = locate(directory, first)
        paths, views = (data_path(found_dir, first), idx_path(found_dir, first)), []
        try:
            for path in paths:
                views.append(read(path))
            return views, paths
        except FileNotFoundError:
            _close(views)
    return None, paths


def _close(views) -> None:
    for view in views:
        getattr(view, "close", lambda: None)()


def wal_plan(fs: Fs, data_dir: str, shard: int, positions: dict,
             done_groups: set) -> list[tuple]:
    """(key, own, idx, path, last in group, start offset, end offset) of every WAL file a
    shard reads in recovery, in order: retired groups oldest first, then its own group,
    each from its checkpoint position."""
    plan = []
    groups = replay_groups(fs, data_dir, shard)
    for n, (key, directory) in enumerate(groups):
        own = n == len(groups) - 1
        if key in done_groups:
            continue
        start_idx, start_offset = positions.get(key, (0, 0))
        files = list_wal_files(fs, directory)
        for i, (idx, path) in enumerate(files):
            if idx < start_idx:
                continue   # absorbed; deleted once a newer snapshot is taken in
            start = start_offset if idx == start_idx else 0
            plan.append((key, own, idx, path, i == len(files) - 1, start, fs.file_size(path)))
    return plan
