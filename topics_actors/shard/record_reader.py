"""Where a shard reads one record of a topic: its WAL frame while it is only in the WAL, its
sealed segment once a snapshot the shard took in has absorbed it, or the RAM buffer for
records of an ephemeral past. Every read rule (diff, scan, retention, deletes) goes
through `read`, so a hole (a deleted, padded or lost seq) is None everywhere alike.
"""

from __future__ import annotations

from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage.file_table import FileTable, StoredRecord
from topics_actors.storage.segment import SegmentReader


class RecordReader:
    def __init__(self, files: FileTable, segments: SegmentReader):
        self.files = files
        self.segments = segments

    def read(self, topic: TopicState, seq: int) -> StoredRecord | None:
        """The record at `seq`, from its segment or the WAL; None for a hole."""
        if seq > topic.absorbed:
            loc = topic.loc(seq)
            return self.files.read(loc, seq) if loc else None
        if seq in topic.deleted:
            return None
        i = topic.segment_of(seq)
        if i < 0:
            loc = topic.ram_past.get(seq) if topic.ram_past else None
            return self.files.read(loc, seq) if loc else None
        rec = self.segments.read(topic.seg_dir, topic.seg_firsts[i], seq)
        if rec.deleted:
            return None
        return StoredRecord(rec.seq, rec.ts, rec.envelope, rec.tag, rec.node, rec.flags)

    def close(self) -> None:
        self.segments.close()
