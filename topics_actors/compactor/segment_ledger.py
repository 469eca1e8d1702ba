"""The compactor's ledger: the same reading of the WAL as a shard's recovery, but accepted
records go into per-topic segment files instead of an in-memory index.

Each topic has at most one open segment, appended to in seq order. A segment is sealed
(no more appends) before a record that is not contiguous (a hole from head padding), or
when it holds TOPICS_SEGMENT_MAX_EVENTS records or TOPICS_SEGMENT_MAX_BYTES of .data, or
when its first record is TOPICS_SEGMENT_MAX_AGE_MS older than the next one (an idle open
segment is also sealed by age at a checkpoint). Segment directories are named
`topics/<topic id:016x>-<n:06>` with n a counter kept in the snapshot, so a topic deleted
and created again never shares files with its previous incarnation.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from array import array
from collections.abc import Callable
from itertools import accumulate, islice, repeat
from operator import add

from topics_actors.compactor.segment_cut import cut_segments
from topics_actors.config import (
    SEGMENT_MAX_AGE_MS_DEFAULT, SEGMENT_MAX_BYTES_DEFAULT, SEGMENT_MAX_EVENTS_DEFAULT,
)
from topics_actors.ledger import delete_rules, log_truncation
from topics_actors.ledger.append_run import AppendBatch
from topics_actors.ledger.topic_ledger import TopicLedger, snapshot_entry
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_envelope import payload_bytes
from topics_actors.storage import failpoint
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment_batch import RECORD_BYTES
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.segment import (
    DATA_FRAME_LEN_MIN, OpenSegment, SegmentReader, data_path, flip_deleted,
    sync_file, topic_dir,
)
from topics_actors.topic_config import TopicConfig

BUFFER_BYTES_MAX = 8 * 1024 * 1024   # spill an open segment's buffer past this
BUFFERS_BYTES_MAX = 4 * 1024 * 1024  # all open segments' buffers: past it the largest spill
SPILL_CHECK_BYTES = 1024 * 1024      # absorbed bytes between two looks at that total
CHECKPOINT_MAPS_MAX = 64             # segments a checkpoint's reads keep mapped, at most
DATA_FRAME_BYTES_MIN = DATA_FRAME_LEN_MIN + 4   # a segment frame of empty data, whole


@dataclasses.dataclass(frozen=True)
class SegmentLimits:
    max_events: int = SEGMENT_MAX_EVENTS_DEFAULT
    max_bytes: int = SEGMENT_MAX_BYTES_DEFAULT
    max_age_ms: int = SEGMENT_MAX_AGE_MS_DEFAULT      # 0 disables sealing by age


class SegmentLedger(TopicLedger):
    def __init__(self, fs: Fs, data_dir: str, limits: SegmentLimits, now_ms: int,
                 tiers: Tiers | None = None):
        super().__init__(now_ms)
        self.fs = fs
        self.data_dir = data_dir
        self.limits = limits
        self.dirs: dict[int, str] = {}                  # topic id -> relative segment dir
        self.sealed: dict[int, list[list[int]]] = {}    # topic id -> [[first, count, bytes]]
        self.open: dict[int, OpenSegment] = {}
        self.next_dir = 1
        self.new_dirs: list[str] = []                   # created since the last flush_all
        self.new_files_in: set[str] = set()             # dirs that got a new segment file
        self.flipped: set[str] = set()                  # .data files with new del bytes
        self.tiers = tiers or Tiers(data_dir)
        self.reader = SegmentReader(fs, max_open=CHECKPOINT_MAPS_MAX, tiers=self.tiers)
        self.unchecked = 0                  # bytes absorbed since the buffers' total was seen

    # --- ledger hooks -------------------------------------------------------------------------

    def new_topic(self, name: str, config: TopicConfig, tid: int) -> TopicState:
        return TopicState(name, config, tid, indexed=False)

    def drop_topic(self, topic: TopicState) -> None:
        super().drop_topic(topic)
        segment = self.open.pop(topic.tid, None)
        if segment is not None:
            segment.close()
        self.dirs.pop(topic.tid, None)
        self.sealed.pop(topic.tid, None)

    def delete_records(self, topic: TopicState, body) -> None:
        """Flip the del byte of every matching record (a before_seq delete only raises the
        delete floor: whole segments below it are dropped, the rest is below earliest)."""
        if body.match is not None:
            self.flush_open(topic.tid)   # matching records may still be in its buffer
        delete_rules.apply(topic, self._read, body.before_seq, body.match,
                            body.bound_head or topic.head + 1, self._flip, account=False)

    def delete_jobs(self, topic: TopicState, seqs: list[int]) -> None:
        """Flip the del byte of a queue's acked or dead-lettered jobs: in the open segment's
        buffer when the job is still there (a job is usually acked soon after it came, and a
        flush per ack would cost two fsyncs), else in its segment file."""
        segment = self.open.get(topic.tid)
        rest = [seq for seq in seqs if segment is None or not segment.delete_pending(seq)]
        topic.deletions += len(seqs) - len(rest)
        delete_rules.delete_seqs(topic, self._read, rest, self._flip, account=False)

    def truncate_records(self, topic: TopicState, last: int) -> None:
        """A follower's cut (ledger/log_truncation.py): the segments of this pass forget
        the records after `last` (segment_cut.py)."""
        self.flush_open(topic.tid)
        log_truncation.cut(topic, last, self._read_any)
        sealed = self.sealed.get(topic.tid, [])
        segment = self.open.pop(topic.tid, None)
        directory = (os.path.join(self.data_dir, self.dirs[topic.tid])
                     if sealed or segment is not None else "")
        segment, kept = cut_segments(self.fs, self.reader, directory, sealed, segment, last)
        if segment is not None:
            self.open[topic.tid] = segment
        if kept:
            self.sealed[topic.tid] = kept
        else:
            self.sealed.pop(topic.tid, None)

    def _read_any(self, topic: TopicState, seq: int):
        """A record of this pass's segments, deleted or not (the compactor's count still
        holds deleted records: the shard's accounting corrects it at the barrier)."""
        where = self._locate(topic, seq)
        return None if where is None else self.reader.read(where[0], where[1], seq)

    def flush_open(self, tid: int) -> None:
        segment = self.open.get(tid)
        if segment is not None:
            segment.flush()

    def _locate(self, topic: TopicState, seq: int) -> tuple[str, int] | None:
        """(topic dir, first seq) of the segment holding `seq` (flushed records only)."""
        segment = self.open.get(topic.tid)
        if segment is not None and segment.first_seq <= seq < segment.next_seq:
            first = segment.first_seq
        else:
            sealed = self.sealed.get(topic.tid, [])
            i = bisect.bisect_right(sealed, seq, key=lambda s: s[0]) - 1
            if i < 0 or seq >= sealed[i][0] + sealed[i][1]:
                return None
            first = sealed[i][0]
        return os.path.join(self.data_dir, self.dirs[topic.tid]), first

    def _read(self, topic: TopicState, seq: int):
        where = self._locate(topic, seq)
        if where is None:
            return None
        rec = self.reader.read(where[0], where[1], seq)
        return None if rec.deleted else rec

    def _flip(self, topic: TopicState, seq: int) -> None:
        hot_dir, first = self._locate(topic, seq)
        directory = self.tiers.resolve(self.fs, hot_dir, first)   # a sealed one may be cold
        flip_deleted(self.fs, directory, first, seq)
        self.flipped.add(data_path(directory, first))

    def store_append(self, topic, view, offset, seq, ts, flags, data_len) -> None:
        self._segment_for(topic, seq, ts).add_from_wal(view, offset, ts)
        topic.publish_one(seq, 0, payload_bytes(data_len, flags), ts)
        self._absorbed(data_len)

    def store_plain(self, topic, view, offset, seq, ts, flags, data_len) -> None:
        self._segment_for(topic, seq, ts).add_plain(view, offset, flags, seq, ts, data_len)
        topic.publish_one(seq, 0, payload_bytes(data_len, flags), ts)
        self._absorbed(data_len)

    def _absorbed(self, size: int) -> None:
        self.unchecked += size
        if self.unchecked >= SPILL_CHECK_BYTES:
            self.keep_buffers()

    def keep_buffers(self) -> None:
        """Bound the memory of a checkpoint, whatever WAL it absorbs: past
        BUFFERS_BYTES_MAX of buffered records, the largest buffers go to their files
        (unsynced: flush_all syncs them) until half that is left."""
        self.unchecked = 0
        dirty = [segment for segment in self.open.values() if segment.data_buf]
        total = sum(segment.buffered_bytes for segment in dirty)
        if total <= BUFFERS_BYTES_MAX:
            return
        dirty.sort(key=lambda segment: segment.buffered_bytes, reverse=True)
        for segment in dirty:
            total -= segment.buffered_bytes
            segment.spill()
            if total <= BUFFERS_BYTES_MAX // 2:
                return

    def store_run(self, topic, view, run) -> None:
        """store_plain for a run of plain Appends, or the records of an AppendBatch: one
        segment write per segment they reach, sealed or flushed at the records the
        per-record path would seal or flush before."""
        done, count, tss = 0, run.count, run.tss
        add = OpenSegment.add_batch if type(run) is AppendBatch else OpenSegment.add_run
        while done < count:
            segment = self._segment_for(topic, run.first_seq + done, tss[done])
            stop = done + records_fitting(self.limits, segment, run, done)
            add(segment, view, run, done, stop)
            done = stop
        topic.publish(run.first_seq, array("Q", (0,)) * count, run.payload_bytes, tss[-1])
        self._absorbed(run.payload_bytes)

    store_batch = store_run

    # --- segments --------------------------------------------------------------------------------

    def _segment_for(self, topic: TopicState, seq: int, ts: int) -> OpenSegment:
        """The open segment that takes `seq` next: the topic's, unless it is full, holds a
        hole before `seq`, or has none (its buffer is flushed first when it is large)."""
        segment = self.open.get(topic.tid)
        if segment is None or seq != segment.next_seq or self._full(segment, ts):
            return self._start(topic, seq)
        if len(segment.data_buf) >= BUFFER_BYTES_MAX:
            segment.spill()
        return segment

    def _full(self, segment: OpenSegment, ts: int) -> bool:
        limits = self.limits
        pending = segment.next_seq - segment.first_seq
        return (pending >= limits.max_events
                or segment.pending_bytes >= limits.max_bytes
                or (limits.max_age_ms > 0 and pending > 0
                    and ts - segment.first_ts >= limits.max_age_ms))

    def _dir_of(self, tid: int) -> str:
        relative = self.dirs.get(tid)
        if relative is None:
            relative = self.dirs[tid] = f"topics/{tid:016x}-{self.next_dir:06d}"
            self.next_dir += 1
            path = os.path.join(self.data_dir, relative)
            root = os.path.join(self.data_dir, "topics")
            if not self.fs.is_dir(root):
                self.fs.makedirs(root)
                self.fs.sync_dir(self.data_dir)
            self.fs.makedirs(path)
            self.new_dirs.append(path)
        return relative

    def _start(self, topic: TopicState, seq: int) -> OpenSegment:
        self.seal(topic.tid)
        relative = self._dir_of(topic.tid)
        segment = OpenSegment(self.fs, os.path.join(self.data_dir, relative), seq)
        self.open[topic.tid] = segment
        self.new_files_in.add(segment.topic_dir)
        return segment

    def seal(self, tid: int) -> None:
        """Make the open segment of `tid` final (written and synced) and forget its handle."""
        segment = self.open.pop(tid, None)
        if segment is None:
            return
        if segment.pending_count:
            segment.flush()
            self.sealed.setdefault(tid, []).append(
                [segment.first_seq, segment.count, segment.data_len])
        segment.close()

    def seal_idle(self, now_ms: int) -> None:
        if self.limits.max_age_ms <= 0:
            return
        for tid in [t for t, s in self.open.items()
                    if s.pending_count and now_ms - s.first_ts >= self.limits.max_age_ms]:
            self.seal(tid)

    def drop_dead(self) -> int:
        """Forget sealed segments wholly below their topic's floors (evicted or deleted):
        the next snapshot does not list them and the reclaimer's sweep removes the files
        once no kept snapshot does."""
        dropped = 0
        for tid, sealed in self.sealed.items():
            topic = self.by_tid.get(tid)
            if topic is None:
                continue
            earliest = max(topic.evict_floor, topic.expiry_floor, topic.delete_floor) + 1
            live = [s for s in sealed if s[0] + s[1] > earliest]
            dropped += len(sealed) - len(live)
            sealed[:] = live
        return dropped

    def flush_all(self, tick: Callable[[], None] = lambda: None) -> None:
        """Make every absorbed record durable: open segments, then the directory entries of
        new segment files and new topic directories."""
        for segment in self.open.values():
            segment.flush()
            tick()
        if self.flipped:
            failpoint.hit("segdel::after_write_before_fsync")
        for path in sorted(self.flipped):   # a flipped del byte is durable before a snapshot
            sync_file(self.fs, path)
        self.flipped.clear()
        failpoint.hit("segput::before_dirfsync")
        for path in sorted(self.new_files_in):
            self.fs.sync_dir(path)
        if self.new_dirs:
            self.fs.sync_dir(os.path.join(self.data_dir, "topics"))
        self.new_dirs.clear()
        self.new_files_in.clear()

    def close(self) -> None:
        for segment in self.open.values():
            segment.close()
        self.open.clear()
        self.reader.close()

    # --- snapshot form ---------------------------------------------------------------------------

    def entries(self, now_ms: int) -> list[dict]:
        """Every topic as the snapshot stores it (call after flush_all)."""
        out = []
        for tid, topic in self.by_tid.items():
            segments = list(self.sealed.get(tid, []))
            segment = self.open.get(tid)
            if segment is not None and segment.count:
                segments.append([segment.first_seq, segment.count, segment.data_len])
            entry = snapshot_entry(topic, self.dirs.get(tid, ""), segments, now_ms)
            entry["open"] = segment is not None and segment.count > 0
            entry["open_first_ts"] = segment.first_ts if entry["open"] else 0
            out.append(entry)
        return out

    def restore(self, entry: dict) -> None:
        relative = entry["dir"]
        path = topic_dir(self.data_dir, relative)
        topic = self.restore_entry(entry, path)
        segments = [list(s) for s in entry["segments"]]
        if relative:
            self.dirs[topic.tid] = relative
        if segments and entry["open"]:
            first, count, data_len = segments.pop()
            segment = OpenSegment(self.fs, path, first, data_len, count)
            segment.first_ts = entry["open_first_ts"]
            self.open[topic.tid] = segment
        if segments:
            self.sealed[topic.tid] = segments


def records_fitting(limits: SegmentLimits, segment: OpenSegment, run, start: int) -> int:
    """How many records of `run` from `start` go into `segment` (which takes the first:
    SegmentLedger._segment_for chose it) before it is full or its buffer is due for a flush."""
    pending = segment.next_seq - segment.first_seq
    take = min(run.count - start, limits.max_events - pending)
    if take > 1:
        # bytes before each later record, against the nearer of the two byte limits
        room = min(limits.max_bytes - segment.pending_bytes,
                   BUFFER_BYTES_MAX - len(segment.data_buf))
        batch = type(run) is AppendBatch
        extra = RECORD_BYTES if batch else DATA_FRAME_BYTES_MIN
        if not batch or run.text_bytes(start, take - 1) + extra * (take - 1) >= room:
            before = accumulate(map(add, islice(run.lens, start, start + take - 1),
                                    repeat(extra)))
            take = 1 + bisect.bisect_left(list(before), room)
    if take > 1 and limits.max_age_ms > 0:
        first_ts = segment.first_ts if pending else run.tss[start]
        too_old = first_ts + limits.max_age_ms
        later = run.tss[start + 1:start + take]
        if max(later) >= too_old:
            take = 1 + next(i for i, ts in enumerate(later) if ts >= too_old)
    return take
