"""The one interpretation of the WAL: frames in, topic states out.

A shard's recovery and the compactor both read the log through a TopicLedger, so they agree
on every rule: an Append is taken only at head + 1 (a seq at or below the head is already
known; a gap means a lost or misdirected frame and is ignored, so loss is a suffix, never a
hole), topic create/update/delete by id, head marks that pad, idempotency keys within their
window. What differs is where an accepted record goes (store_append) and which topics the
reader owns (owns).

It also carries the snapshot form of a topic (snapshot_entry / restore_entry), so what a
checkpoint writes and what a recovery loads are defined in one place.
"""

from __future__ import annotations

import collections
import itertools
import struct
from array import array
from collections.abc import Callable

import xxhash

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.ledger.dedupe_index import DedupeEntry
from topics_actors.ledger.op_log import OpLog
from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger import append_run, extension_frames, log_truncation
from topics_actors.ledger.append_run import AppendBatch, AppendRun
from topics_actors.ledger.queue_state import QueueState, queue_of
from topics_actors.ledger.router_state import RouterState
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_envelope import payload_bytes
from topics_actors.storage import batch_frame, frame_body
from topics_actors.storage.frame import APPEND_BATCH, FRAME_LEN_MIN, HEADER, Frame, decode_at
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import TopicConfig
from topics_actors.topic_identity import topic_id

_CHECKSUM = struct.Struct("<Q")
_digest = xxhash.xxh3_64_intdigest


class TopicLedger:
    def __init__(self, now_ms: int, owns: Callable[[int], bool] = lambda tid: True):
        self.by_tid: dict[int, TopicState] = {}
        self.now = now_ms
        self.owns = owns
        self.applied = 0
        self.ignored: collections.Counter[str] = collections.Counter()
        self.position = (0, 0)      # (layout generation, file idx) of the file being read
        self.audit = None           # a RecoveryAudit (recovery, fsck): mismatches quarantine
        self.frozen: dict = {}      # tid -> its Quarantine: frames not applied from there on
        self.marks = 0              # checkpoint barriers read (a checkpoint may absorb to them)

    # --- hooks -------------------------------------------------------------------------------

    def add_topic(self, topic: TopicState) -> None:
        self.by_tid[topic.tid] = topic

    def drop_topic(self, topic: TopicState) -> None:
        self.by_tid.pop(topic.tid, None)

    def store_append(self, topic: TopicState, view, offset: int, seq: int, ts: int,
                     flags: int, data_len: int) -> None:
        topic.publish_one(seq, 0, payload_bytes(data_len, flags), ts)

    def store_run(self, topic: TopicState, view, run: AppendRun) -> None:
        """store_plain for each record of a run of plain Appends; a ledger overrides it
        with one step for the whole run."""
        store, flags = self.store_plain, run.flags
        for offset, seq, ts, data_len in zip(run.offsets, itertools.count(run.first_seq),
                                             run.tss, run.lens):
            store(topic, view, offset, seq, ts, flags, data_len)

    def store_batch(self, topic: TopicState, view, batch: AppendBatch) -> None:
        """The records of an AppendBatch frame (from the topic's head + 1 on)."""
        topic.publish(batch.first_seq, array("Q", (0,)) * batch.count, batch.payload_bytes,
                      batch.ts)

    @property
    def store_plain(self):
        """store_append for an Append the scan found plain (no node, no tag), for a ledger
        that has a cheaper way with those (the compactor's segments)."""
        return self.store_append

    def new_topic(self, name: str, config: TopicConfig, tid: int) -> TopicState:
        return TopicState(name, config, tid)

    def delete_records(self, topic: TopicState, body: frame_body.DeleteBody) -> None:
        """A logged record delete (the shard's recovery; the compactor flips del bytes)."""

    def delete_jobs(self, topic: TopicState, seqs: list[int]) -> None:
        """Jobs that left a queue (acked or dead-lettered): deleted like records."""

    def truncate_records(self, topic: TopicState, last: int) -> None:
        """A follower's cut (ledger/log_truncation.py): records after `last` are dropped.
        Here (fsck's audit) count and bytes are left alone; the shard's recovery and the
        compactor read what they drop."""
        log_truncation.cut(topic, last, None)

    # --- the scan ----------------------------------------------------------------------------

    def scan(self, view, offset: int, end: int, max_frames: int) -> tuple[int, bool]:
        """Apply up to `max_frames` valid frames from `offset`. Returns (offset after the
        last valid frame, whether the log ended: an invalid frame or the end of the data)."""
        mv = memoryview(view)
        try:
            return self._scan(view, mv, offset, end, max_frames)
        finally:
            mv.release()   # an exception must not leave the mapping exported

    def _scan(self, view, mv, offset: int, end: int, max_frames: int) -> tuple[int, bool]:
        unpack, unpack_sum, digest = HEADER.unpack_from, _CHECKSUM.unpack_from, _digest
        by_tid, owns, frozen, store = self.by_tid, self.owns, self.frozen, self.store_plain
        budget = max_frames
        while budget > 0:
            if end - offset < 4 + FRAME_LEN_MIN:
                return offset, True
            (frame_len, ftype, flags, tid, seq, ts,
             node_len, tag_len, data_len) = unpack(view, offset)
            check_at = offset + frame_len - 4
            if (frame_len < FRAME_LEN_MIN or offset + 4 + frame_len > end
                    or 42 + node_len + tag_len + data_len != frame_len
                    or digest(mv[offset + 4:check_at]) != unpack_sum(view, check_at)[0]):
                return offset, True
            budget -= 1
            after = offset + 4 + frame_len
            if ftype == 1 and not (node_len or tag_len):
                if owns(tid):
                    topic = by_tid.get(tid)
                    if frozen and tid in frozen:
                        self.audit.skipped(frozen[tid], offset, 4 + frame_len, 1)
                    elif topic is not None and seq == topic.head + 1 and topic.config.logged:
                        # a run needs a next frame that is an Append (type byte 1);
                        # looking first spares single-record appends the call
                        run = (budget and end - after > FRAME_LEN_MIN and view[after + 4] == 1
                               and append_run.gather(
                                   view, mv, after, end, (offset, tid, seq, ts, flags, data_len),
                                   min(budget, append_run.RUN_FRAMES_MAX)))
                        if run:
                            self.store_run(topic, view, run)
                            self.applied += run.count
                            budget -= run.count - 1
                            after = run.end
                        else:
                            store(topic, view, offset, seq, ts, flags, data_len)
                            self.applied += 1
                    else:
                        self._skip_append(topic, seq, offset, 4 + frame_len)
            elif ftype == APPEND_BATCH and not tag_len:
                if not self._batch(view, offset, tid, seq, ts, flags, node_len, data_len,
                                   4 + frame_len):
                    return offset, True
            else:
                frame = decode_at(view, offset, end)   # full checks: UTF-8, body
                if frame is None:
                    return offset, True
                if owns(tid):
                    if frozen and tid in frozen:
                        self.audit.skipped(frozen[tid], offset, frame.size,
                                           _records_of(frame))
                    else:
                        self.apply(frame, view)
            offset = after
        return offset, False

    def _batch(self, view, offset: int, tid: int, seq: int, ts: int, flags: int,
               node_len: int, data_len: int, size: int) -> bool:
        """Take the AppendBatch frame at `offset` (header and checksum checked): its records
        after the topic's head, as that many Append frames would be taken. False when its
        body or node breaks a rule: the log ends there."""
        topic = self.by_tid.get(tid) if self.owns(tid) else None
        batch = append_run.batch_at(view, offset, seq, ts, flags, node_len, data_len,
                                    topic.head if topic is not None else 0)
        if batch is None or not _utf8(view, offset + HEADER.size, node_len):
            return False
        if not self.owns(tid):
            return True
        if self.frozen and tid in self.frozen:
            self.audit.skipped(self.frozen[tid], offset, size, batch.count)
        elif topic is not None and seq <= topic.head + 1 and topic.config.logged:
            if batch.count:
                self.store_batch(topic, view, batch)
                self.applied += batch.count
        else:
            self._skip_append(topic, seq, offset, size, batch.count)
        return True

    def _skip_append(self, topic: TopicState | None, seq: int, offset: int,
                     size: int, records: int = 1) -> None:
        if topic is None:
            self.ignored["append_without_topic"] += 1
        elif seq > topic.head + 1:
            if self.audit is not None and topic.config.logged:
                self.audit.mismatch(topic, f"append of seq {seq} after head {topic.head}: "
                                    "seqs are not contiguous", offset, size, records)
            else:
                self.ignored["append_out_of_order"] += 1

    def apply(self, frame: Frame, view=None) -> None:
        handler = _HANDLERS.get(frame.type)
        if handler is None:
            self.ignored[FrameType(frame.type).name.lower()] += 1
            return
        handler(self, frame, view)
        self.applied += 1

    # --- frames ------------------------------------------------------------------------------

    def topic_of(self, frame: Frame, what: str) -> TopicState | None:
        """The frame's topic; None (counted as ignored `what`) when there is none."""
        topic = self.by_tid.get(frame.topic_id)
        if topic is None:
            self.ignored[f"{what}_without_topic"] += 1
        return topic

    def _append_batch(self, frame: Frame, view) -> None:
        """An AppendBatch that came through decode_at (the scan takes them itself; this is
        for readers that hand frames to apply one by one)."""
        node_len = len(frame.node.encode()) if frame.node else 0
        self._batch(view, frame.offset, frame.topic_id, frame.seq, frame.ts, frame.flags,
                    node_len, len(frame.data), frame.size)
        self.applied -= 1         # apply() counts the frame; _batch counted its records

    def _append(self, frame: Frame, view) -> None:
        topic = self.by_tid.get(frame.topic_id)
        if topic is not None and frame.seq == topic.head + 1 and topic.config.logged:
            self.store_append(topic, view, frame.offset, frame.seq, frame.ts, frame.flags,
                              len(frame.data))
        else:
            self._skip_append(topic, frame.seq, frame.offset, frame.size)

    def _topic_create(self, frame: Frame, view) -> None:
        body = frame_body.decode_body(frame.type, frame.data)
        if topic_id(body.name) != frame.topic_id:
            self.ignored["topic_id_mismatch"] += 1
            return
        config = TopicConfig.from_bytes(body.config)
        topic = self.by_tid.get(frame.topic_id)
        if topic is None:
            topic = self.new_topic(body.name, config, frame.topic_id)
            topic.created_at = (*self.position, frame.offset)
            self.add_topic(topic)
        else:
            topic.config = config

    def _topic_delete(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "delete")
        if topic is not None:
            self.drop_topic(topic)
            if self.audit is not None:
                self.audit.forget(topic.tid)

    def _delete(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "delete_records")
        if topic is None:
            return
        body = frame_body.decode_body(frame.type, frame.data)
        if body.seqs:     # named seqs (a replicated queue's acked jobs): those alone
            self.delete_jobs(topic, list(body.seqs))
        else:
            self.delete_records(topic, body)

    def _evict_watermark(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "evict")
        if topic is not None:   # floors only rise, whatever order the marks come in
            body = frame_body.decode_body(frame.type, frame.data)
            topic.evict_floor = max(topic.evict_floor, body.evict_floor)
            topic.expiry_floor = max(topic.expiry_floor, body.expiry_floor)

    def _lease(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "lease")
        if topic is None:
            return
        if frame.seq > topic.head and self.audit is not None and topic.config.logged:
            self.audit.mismatch(topic, f"lease frame of seq {frame.seq} past head "
                                f"{topic.head}: no durable record", frame.offset, frame.size,
                                0)
            return
        body = frame_body.decode_body(frame.type, frame.data)
        if queue_of(topic).apply_frame(frame.seq, body.event, body.lease_id, body.deadline_ms,
                                       body.deliveries, body.node,
                                       topic.config.leases_durable):
            self.delete_jobs(topic, [frame.seq])

    def _checkpoint_mark(self, frame: Frame, view) -> None:
        self.marks += 1

    def account(self, rows: list) -> None:
        """Take a shard's accounting ([tid, *ACCOUNTING] rows, exact at its barrier)."""
        for tid, *values in rows:
            topic = self.by_tid.get(tid)
            if topic is not None:
                for name, value in zip(ACCOUNTING, values):
                    setattr(topic, name, value)

    def _head_watermark(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "watermark")
        if topic is None:
            return
        ceiling = frame_body.decode_body(frame.type, frame.data)
        if frame.seq:   # a head mark: the head is at least here (seqs without records are holes)
            topic.pad_to(frame.seq)
        if frame.seq and frame.seq == ceiling:
            # An exact mark (restart padding or clean shutdown): no seq above it was acked.
            topic.reserved_head = topic.head
        else:
            topic.reserved_head = max(topic.reserved_head, ceiling)

    def _idem_key(self, frame: Frame, view) -> None:
        topic = self.topic_of(frame, "idem_key")
        if topic is None or topic.head < frame.seq:
            return
        if self.now - frame.ts > topic.config.idempotency_window_ms:
            return
        body = frame_body.decode_body(frame.type, frame.data)
        entry = DedupeEntry(frame.seq - body.count + 1, frame.seq, frame.seq, frame.ts)
        topic.dedupe.add(body.key, entry, topic.config.idempotency_window_ms)

    # --- snapshot form -----------------------------------------------------------------------

    def restore_entry(self, entry: dict, seg_dir: str) -> TopicState:
        """Recreate a topic from its snapshot entry (restore_topic)."""
        topic = restore_topic(entry, seg_dir, self.new_topic, self.now)
        self.add_topic(topic)
        return topic

def _utf8(view, at: int, length: int) -> bool:
    """Whether view[at:at + length] is UTF-8 (a node's text)."""
    try:
        bytes(view[at:at + length]).decode()
    except UnicodeDecodeError:
        return False
    return True


def _records_of(frame: Frame) -> int:
    """How many records a (checked) frame holds: 1 for an Append, its count for an
    AppendBatch, 0 for any other."""
    if frame.type == FrameType.APPEND:
        return 1
    if frame.type == FrameType.APPEND_BATCH:
        return batch_frame.count(frame.data, 0)
    return 0


_COUNTERS = ("head", "reserved_head", "count", "bytes", "last_write_ts", "evict_floor",
             "expiry_floor", "delete_floor", "source_trim_floor", "gone_through")
# What only the owning shard knows exactly (the records cap floor and the drop accounting):
# sent with every checkpoint barrier, applied by the compactor (see account()).
ACCOUNTING = ("gone_through", "count", "bytes", "evict_floor", "expiry_floor")


def snapshot_entry(topic: TopicState, seg_dir: str, segments: list[list[int]],
                   now_ms: int) -> dict:
    """A topic as a snapshot stores it: metadata and segment list, no payloads. Every
    record up to `absorbed` (= head) is in `segments` ([first_seq, count, data_len]) or is
    a hole."""
    entry = {name: getattr(topic, name) for name in _COUNTERS}
    window = topic.config.idempotency_window_ms
    topic.dedupe.expire(now_ms, window)
    entry.update(name=topic.name, tid=topic.tid, config=topic.config.to_bytes(),
                 absorbed=topic.head, dir=seg_dir, segments=segments,
                 dedupe=[[key, e.first_seq, e.last_seq, e.head_seq, e.created_ms]
                         for key, e in topic.dedupe.user.items()
                         if now_ms - e.created_ms <= window],
                 sessions=topic.dedupe.session_rows())
    if topic.trims:
        entry["trims"] = [list(t) for t in topic.trims]
    if topic.routers:
        entry["routers"] = [router.to_entry() for router in topic.routers.values()]
    if topic.epochs is not None and topic.epochs.latest is not None:
        entry["epochs"] = [list(e) for e in topic.epochs.entries()]
    if topic.ops is not None:
        entry["ops"] = topic.ops.to_entry()
    if topic.queue is not None:
        floor = live_floor(topic)
        entry["queue"] = topic.queue.to_entry(topic.config.leases_durable,
                                              lambda seq: floor < seq <= topic.head)
    return entry



def restore_topic(entry: dict, seg_dir: str, new_topic: Callable[..., TopicState],
                  now: int) -> TopicState:
    """A topic recreated from its snapshot entry (snapshot_entry's form); `new_topic`:
    the ledger's maker of a topic state."""
    topic = new_topic(entry["name"], TopicConfig.from_bytes(entry["config"]), entry["tid"])
    for name in _COUNTERS:
        setattr(topic, name, entry[name] if name != "gone_through" else entry.get(name, 0))
    topic.next_seq = topic.head + 1
    topic.wal_base = topic.head + 1
    if topic.indexed:
        topic.wal_base = entry["absorbed"] + 1
        topic.locs.frombytes(bytes(8 * (topic.head - entry["absorbed"])))
    topic.absorbed = entry["absorbed"]
    topic.seg_dir = seg_dir
    topic.seg_firsts = [s[0] for s in entry["segments"]]
    topic.seg_counts = [s[1] for s in entry["segments"]]
    window = topic.config.idempotency_window_ms
    for key, first, last, head, ts in entry["dedupe"]:   # (older snapshots: sessions' too)
        if now - ts <= window:
            topic.dedupe.add(key, DedupeEntry(first, last, head, ts), window)
    for row in entry.get("sessions", ()):
        topic.dedupe.take_row(row, now, window)
    if "queue" in entry:
        topic.queue = QueueState.from_entry(entry["queue"])
    if entry.get("trims"):
        topic.trims = [list(t) for t in entry["trims"]]
    if entry.get("routers"):
        topic.routers = {r[0]: RouterState.from_entry(r) for r in entry["routers"]}
    if entry.get("epochs"):
        topic.epochs = EpochCache([tuple(e) for e in entry["epochs"]])
    if entry.get("ops"):
        topic.ops = OpLog.from_entry(entry["ops"])
    return topic


def accounting_rows(topics) -> list[list[int]]:
    """[tid, *ACCOUNTING] for every topic with floors (sent with a checkpoint barrier)."""
    return [[t.tid, *(getattr(t, name) for name in ACCOUNTING)] for t in topics
            if t.gone_through or t.evict_floor or t.expiry_floor or t.deletions]


_HANDLERS = {
    FrameType.APPEND: TopicLedger._append,
    FrameType.APPEND_BATCH: TopicLedger._append_batch,
    FrameType.TOPIC_CREATE: TopicLedger._topic_create,
    FrameType.CONFIG_UPDATE: TopicLedger._topic_create,
    FrameType.TOPIC_DELETE: TopicLedger._topic_delete,
    FrameType.HEAD_WATERMARK: TopicLedger._head_watermark,
    FrameType.EVICT_WATERMARK: TopicLedger._evict_watermark,
    FrameType.DELETE: TopicLedger._delete,
    FrameType.IDEM_KEY: TopicLedger._idem_key,
    FrameType.LEASE: TopicLedger._lease,
    FrameType.CHECKPOINT_MARK: TopicLedger._checkpoint_mark,
    FrameType.ROUTER_CREATE: extension_frames.router_create,
    FrameType.ROUTER_DELETE: extension_frames.router_delete,
    FrameType.ROUTER_CURSOR: extension_frames.router_cursor,
    FrameType.FILLER: lambda self, frame, view: None,
    FrameType.EPOCH: extension_frames.epoch,
    FrameType.REPL_OP: extension_frames.repl_op,
    FrameType.OPS_COMMIT: extension_frames.ops_commit,
    FrameType.OPS_DROP: extension_frames.ops_drop,
    FrameType.TRUNCATE: extension_frames.truncate,
}
