"""Recovery of one shard: the newest valid snapshot, then the WAL after its positions, then
the torn tail cut off, disk-class head reservations turned into holes, and the writer open.

The snapshot gives every owned topic its config, head, floors and segment list (records up
to the checkpoint are read from segment files, nothing is loaded per record). Replay then
reads every group the shard must read from that group's checkpoint position: retired
generations oldest first, then its own group, file order, frame order, all through the
TopicLedger with a RecoveryAudit attached (ledger/recovery_audit.py): a torn tail (no valid
frame after the damage) is the log's end and is cut off; damage inside the log, a gap in a
topic's seqs and a lease of a seq with no durable record quarantine the topics they
concern, whose state stops at their last valid record, and go to the recovery policy
(quarantine_book.py); every other topic replays in full. The snapshot's segments are queued
for the segment check, which runs once the shard serves. Own WAL files below the checkpoint
are absorbed and skipped; they are deleted when the next snapshot is taken in (one snapshot
back stays replayable).
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Iterator
from itertools import repeat
from operator import or_

from topics_actors.config import ShardOptions
from topics_actors.ledger import delete_rules, log_truncation, retention_rules
from topics_actors.ledger.recovery_audit import RecoveryAudit, wal_plan
from topics_actors.ledger.topic_ledger import TopicLedger
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_envelope import META_OVERHEAD, PLAIN_OVERHEAD
from topics_actors.shard import head_marks
from topics_actors.shard.quarantine_book import QuarantineBook
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.shard.wal_file_set import WalFileSet
from topics_actors.storage import failpoint
from topics_actors.storage.file_table import make_loc
from topics_actors.storage.fs import Fs
from topics_actors.storage.frame_types import FLAG_META
from topics_actors.storage.segment import topic_dir
from topics_actors.storage.snapshot import BODY_KEYS, load_newest
from topics_actors.storage.wal_layout import key_generation, layout_generation
from topics_actors.storage.wal_scan import describe_end, zeros_from

log = logging.getLogger(__name__)

CHUNK_FRAMES = 4096                   # frames between looks at the clock
PROGRESS_INTERVAL_NS = 50_000_000     # a yield at least this often: beats, not_ready, stop


class ShardLedger(TopicLedger):
    """The ledger of a recovering shard: topics go into its registry, records get WAL
    locations."""

    def __init__(self, registry: TopicRegistry, reader: RecordReader, now_ms: int):
        super().__init__(now_ms, registry.owns)
        self.registry = registry
        self.reader = reader
        self.by_tid = registry.by_tid
        self.loc_base = 0             # location of offset 0 of the file being read

    def add_topic(self, topic: TopicState) -> None:
        self.registry.register(topic)

    def drop_topic(self, topic: TopicState) -> None:
        self.registry.unregister(topic)

    def delete_records(self, topic: TopicState, body) -> None:
        delete_rules.apply(topic, self.reader.read, body.before_seq, body.match,
                           body.bound_head or topic.head + 1, TopicState.delete_one)

    def delete_jobs(self, topic: TopicState, seqs: list[int]) -> None:
        delete_rules.delete_seqs(topic, self.reader.read, seqs, TopicState.delete_one)

    def truncate_records(self, topic: TopicState, last: int) -> None:
        log_truncation.cut(topic, last, self.reader.read)

    def store_append(self, topic, view, offset, seq, ts, flags, data_len,
                     meta_flag=FLAG_META, plain=PLAIN_OVERHEAD, with_meta=META_OVERHEAD) -> None:
        # The hottest call of a recovery (once per record): record_envelope.payload_bytes,
        # inlined with its constants bound here (measured: 4% of the replay time).
        topic.publish_one(seq, self.loc_base | offset,
                          data_len - (with_meta if flags & meta_flag else plain), ts)

    def store_run(self, topic, view, run) -> None:
        topic.publish(run.first_seq, list(map(or_, repeat(self.loc_base), run.offsets)),
                      run.payload_bytes, run.tss[-1])

    def store_batch(self, topic, view, batch) -> None:
        # every record of a batch is at its frame's location
        topic.publish(batch.first_seq, array("Q", (self.loc_base | batch.offset,)) * batch.count,
                      batch.payload_bytes, batch.ts)


class Replay:
    def __init__(self, fs: Fs, options: ShardOptions, registry: TopicRegistry,
                 wal: WalFileSet, reader: RecordReader, clock,
                 book: QuarantineBook | None = None, checkpoints=None):
        self.fs = fs
        self.options = options
        self.registry = registry
        self.wal = wal
        self.reader = reader
        self.clock = clock
        self.ledger = ShardLedger(registry, reader, clock())
        self.audit = RecoveryAudit(options.data_dir)
        self.ledger.audit, self.ledger.frozen = self.audit, self.audit.frozen
        self.book = book if book is not None else QuarantineBook(fs, options.shard)
        self.positions: dict[str, list[int]] = {}
        self.done_groups: set[str] = set()
        self.snapshot_id = 0
        self.checkpoints = checkpoints   # a CheckpointWindow: told of barriers not absorbed

    @property
    def applied(self) -> int:
        return self.ledger.applied

    @property
    def ignored(self):
        return self.ledger.ignored

    def run(self) -> Iterator[float]:
        """Replay, yielding progress in [0, 1) now and then; ends with the shard writable."""
        wal = self.wal
        wal.generation = layout_generation(self.fs, self.options.data_dir)
        self._load_snapshot()
        plan = self._plan()
        total, done = max(1, sum(end - start for *_, start, end in plan)), 0
        resume = None
        next_yield = time.monotonic_ns() + PROGRESS_INTERVAL_NS
        for key, own, idx, path, last, start, end in plan:
            view = self.fs.map_read(path)
            file_no = wal.add_replayed(path, view, own, idx)
            self.ledger.loc_base = make_loc(file_no, 0)
            self.ledger.position = (key_generation(key), idx)
            scan, offset = self.audit.scan_file(self.ledger, view, path, start, end,
                                                CHUNK_FRAMES, own, last), start
            while True:
                try:
                    reached = next(scan)
                except StopIteration as stop:
                    log_end = stop.value
                    break
                if failpoint.armed("recovery::mid_replay") and reached > offset:
                    failpoint.hit("recovery::mid_replay")
                done, offset = done + max(0, reached - offset), reached
                if time.monotonic_ns() >= next_yield:
                    next_yield = time.monotonic_ns() + PROGRESS_INTERVAL_NS
                    yield min(0.99, done / total)
            done += max(0, end - offset)
            if own and last:
                resume = self._finish_own(path, file_no, idx, log_end, len(view))
        log.info("event=replayed shard=%d snapshot=%d frames=%d ignored=%s topics=%d "
                 "quarantined=%d torn_tails=%d", self.options.shard, self.snapshot_id,
                 self.ledger.applied, dict(self.ledger.ignored), len(self.registry),
                 len(self.audit.quarantined), len(self.audit.tails))
        self.book.take(self.audit)
        if self.ledger.marks and self.checkpoints is not None:
            # A checkpoint of the previous run may still absorb up to one of these barriers.
            self.checkpoints.barrier()
        self._open_writer(resume)
        head_marks.seal_reservations(self.registry, wal.writer, self.clock, pad=True)
        for topic in self.registry:   # records cap floors and the drop accounting
            retention_rules.settle(topic, self.reader.read)
            if topic.config.replicated:   # may have lost a tail: not to lead in this epoch
                topic.unsettled_epoch = topic.epochs.latest if topic.epochs else None

    def _load_snapshot(self) -> None:
        data_dir, wal = self.options.data_dir, self.wal
        found = load_newest(self.fs, data_dir, BODY_KEYS)
        if found is None:
            return
        self.snapshot_id, body = found
        wal.snapshot_id = self.snapshot_id
        self.positions = body["positions"]
        wal.kept_checkpoint_idx = self.positions.get(wal.group_key, (0, 0))[0]
        for entry in body["topics"]:
            if self.registry.owns(entry["tid"]):
                directory = topic_dir(data_dir, entry["dir"])
                self.ledger.restore_entry(entry, directory)
                # checked once the shard serves (quarantine_book.py: the segment check)
                self.book.queue_segments(entry["tid"], entry["segments"], directory)
        self.done_groups = set(body["retired_done"])

    def _plan(self) -> list[tuple]:
        """(key, own, idx, path, last in group, start offset, end offset) per file to read."""
        return wal_plan(self.fs, self.options.data_dir, self.options.shard, self.positions,
                        self.done_groups)

    def _finish_own(self, path: str, file_no: int, idx: int, valid_len: int,
                    size: int) -> tuple[int, int]:
        # Only zeros after the log (the preallocation) are kept, so the writer goes on in
        # place; anything else is cut off, lest a later scan read stale frames past new ones.
        if valid_len < size and not zeros_from(self.wal.files.view(file_no), valid_len):
            self._truncate(path, file_no, valid_len)
        return idx, valid_len

    def _open_writer(self, resume: tuple[int, int] | None) -> None:
        writer = self.wal.writer
        checkpoint = tuple(self.positions.get(self.wal.group_key, (0, 0)))
        if resume is not None and resume >= checkpoint:
            writer.open(*resume)
            return
        if checkpoint != (0, 0):
            # The log ends before the checkpoint (lost or damaged files): never write below
            # a checkpoint position, or a later recovery would skip the new frames.
            log.error("event=wal_ends_before_checkpoint shard=%d checkpoint=%s end=%s",
                      self.options.shard, checkpoint, resume)
        writer.open(checkpoint[0] + 1 if checkpoint != (0, 0) else 0, 0, fresh=True)

    def _truncate(self, path: str, file_no: int, valid_len: int) -> None:
        failpoint.hit("recovery::before_truncate")
        view = self.wal.files.view(file_no)
        reason = describe_end(view, valid_len, len(view))
        if reason.startswith("torn"):
            log.warning("event=torn_tail path=%s offset=%d reason=%r", path, valid_len, reason)
        handle = self.fs.open(path)
        try:
            handle.set_len(valid_len)
            handle.sync_all()
        finally:
            handle.close()
        self.wal.files.remap(file_no)
