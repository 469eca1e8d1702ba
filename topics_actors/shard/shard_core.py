"""The shard's pure core: requests in, staged WAL frames, one commit, replies out.

The socket shell feeds every request of one loop turn to submit(), then calls commit():
the batch is written with one write() and, if it holds fsync-class frames, one fdatasync;
only then are its effects published (in arrival order) and its replies produced. A failed
write or sync rolls every staged change back, erases the bytes and fails every write of the
batch. Reads queued in the same turn run after the publish, so nothing uncommitted is seen.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable

from topics_actors.config import ShardOptions
from topics_actors.errors import ErrorCode, StorageError, TopicsError, invalid, topic_not_found
from topics_actors.limits import INBOX_BYTES_MAX, INBOX_REQUESTS_MAX
from topics_actors.protocol import encode_error, encode_reply
from topics_actors.protocol.messages import (
    Absorbed, Append, Checkpoint, DeleteRecords, DeleteTopic, Diff, GetTopic, ListTopics,
    PutTopic, Retain, Scan, Status,
)
from topics_actors.record_batch import PAYLOAD_BYTES, TAG, StagedRecord, stage_batch
from topics_actors.shard import head_marks, range_scan, record_delete, retention
from topics_actors.shard.absorption import absorb_snapshot, stage_barrier
from topics_actors.shard.byte_quota import ByteQuota
from topics_actors.shard.diff_read import diff, validate_diff
from topics_actors.shard.file_table import FileTable, StoredRecord, make_loc
from topics_actors.shard.long_poll import LongPolls, Waiter
from topics_actors.shard.dedupe_index import DedupeEntry
from topics_actors.shard.topic_state import TopicState
from topics_actors.shard.write_batch import Batch, CommitInfo, Op, fail_with
from topics_actors.storage import frame_body
from topics_actors.storage.frame import encode, encode_appends
from topics_actors.storage.frame_types import FLAG_DURABLE, FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import SegmentReader
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.wal_layout import group_dir, shard_key, wal_file_name
from topics_actors.storage.wal_writer import WalWriter
from topics_actors.topic_config import TopicConfig, parse_config
from topics_actors.topic_identity import shard_of, topic_id, valid_topic_name

log = logging.getLogger(__name__)

HEAD_RESERVE = 256


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ShardCore:
    def __init__(self, fs: RealFs, options: ShardOptions, clock: Callable[[], int] = now_ms):
        self.fs = fs
        self.options = options
        self.clock = clock
        self.topics: dict[str, TopicState] = {}
        self.by_tid: dict[int, TopicState] = {}
        self.names: list[str] = []
        self.files = FileTable(fs)
        self.segments = SegmentReader(fs, tiers=Tiers(options.data_dir, options.cold_dir))
        self.quota = ByteQuota(options.quota_file, options.shard, options.max_total_bytes)
        self.generation = 1           # WAL layout generation (set by recovery)
        self.snapshot_id = 0          # the newest snapshot whose records we read from segments
        self.kept_checkpoint_idx = 0  # WAL files below this one may be deleted
        self.wal_dir = group_dir(options.data_dir, options.shard)
        self.writer = WalWriter(fs, self.wal_dir, options.wal_file_bytes,
                                options.background_prealloc)
        self._own_files: dict[int, int] = {}         # own WAL file idx -> file number
        self.retired_files: dict[int, str] = {}      # file number -> path (retired groups)
        self._owned: dict[int, bool] = {}   # topic id -> owned by this shard (a hash each)
        self.batch = Batch()
        self.polls = LongPolls()
        self._woken: set[str] = set()
        self.ready = False
        self.replay_progress = 0.0
        self.stats = {"batches": 0, "syncs": 0, "records": 0, "requests": 0,
                      "throttled": 0, "failed_batches": 0}
        self._handlers = {Append: self._append, PutTopic: self._put_topic,
                          DeleteTopic: self._delete_topic, Diff: self._diff,
                          GetTopic: self._get_topic, ListTopics: self._list_topics,
                          Status: self._status, Checkpoint: self._checkpoint,
                          Absorbed: self._absorbed, Retain: self._retain,
                          DeleteRecords: self._delete_records}
        self._handlers[Scan] = lambda *request: range_scan.scan_request(self, *request)

    # --- topic registry -------------------------------------------------------------------

    def owns(self, tid: int) -> bool:
        owned = self._owned.get(tid)
        if owned is None:
            if len(self._owned) >= 1_000_000:
                self._owned.clear()
            owned = self._owned[tid] = (
                shard_of(tid, self.options.shard_count) == self.options.shard)
        return owned

    def register(self, topic: TopicState) -> None:
        self.topics[topic.name] = topic
        self.by_tid[topic.tid] = topic
        index = bisect.bisect_left(self.names, topic.name)
        if index == len(self.names) or self.names[index] != topic.name:
            self.names.insert(index, topic.name)

    def unregister(self, topic: TopicState) -> None:
        if self.topics.get(topic.name) is topic:
            del self.topics[topic.name]
            self.by_tid.pop(topic.tid, None)
            index = bisect.bisect_left(self.names, topic.name)
            if index < len(self.names) and self.names[index] == topic.name:
                del self.names[index]

    def file_no_for(self, idx: int) -> int:
        file_no = self._own_files.get(idx)
        if file_no is None:
            path = os.path.join(self.wal_dir, wal_file_name(idx))
            file_no = self._own_files[idx] = self.files.add_path(path)
        return file_no

    # --- request intake -------------------------------------------------------------------

    def submit(self, peer: bytes, corr: int, msg, t0_ns: int) -> None:
        self.stats["requests"] += 1
        try:
            name = getattr(msg, "topic", None)
            if name is not None and not self.owns(topic_id(name)):
                raise TopicsError(f"topic {name!r} belongs to another shard",
                                  ErrorCode.NOT_READY,
                                  {"reason": "wrong_shard", "shard": self.options.shard})
            self._handlers[type(msg)](peer, corr, msg, t0_ns)
        except TopicsError as error:
            self.batch.ops.append(Op(peer, corr, t0_ns, False, fail_with(error)))

    def submit_error(self, peer: bytes, corr: int, error: TopicsError, t0_ns: int) -> None:
        self.batch.ops.append(Op(peer, corr, t0_ns, False, fail_with(error)))

    def _inbox_full(self) -> bool:
        batch = self.batch
        return batch.writes >= INBOX_REQUESTS_MAX or len(batch.buf) >= INBOX_BYTES_MAX

    def _write_op(self, peer, corr, t0_ns, fn) -> None:
        self.batch.writes += 1
        self.batch.ops.append(Op(peer, corr, t0_ns, True, fn))

    def _read_op(self, peer, corr, t0_ns, fn) -> None:
        self.batch.ops.append(Op(peer, corr, t0_ns, False, fn))

    def _throttle(self) -> None:
        if self._inbox_full():
            self.stats["throttled"] += 1
            raise TopicsError("shard inbox is full; retry", ErrorCode.THROTTLED,
                              {"retry_after_ms": 1000})

    def _save_undo(self, name: str) -> None:
        undo = self.batch.undo
        if name not in undo:
            topic = self.topics.get(name)
            undo[name] = ((topic, topic.next_seq, topic.reserved_head, topic.config)
                          if topic is not None else (None, 0, 0, None))

    def _frame(self, ftype: int, topic: TopicState | None, data: bytes, seq: int = 0,
               sync: bool = True) -> None:
        batch = self.batch
        encode(batch.buf, ftype, FLAG_DURABLE if sync else 0, topic.tid if topic else 0,
               seq, self.clock(), data)
        batch.needs_sync |= sync

    # --- topics: put / get / list / delete ------------------------------------------------

    def _stage_create(self, name: str, config: TopicConfig) -> TopicState:
        if not valid_topic_name(name):
            raise invalid(f"invalid topic name {name!r}")
        tid = topic_id(name)
        clash = self.by_tid.get(tid)
        if clash is not None and clash.name != name:
            raise TopicsError(f"topic id collision between {name!r} and {clash.name!r}")
        self._save_undo(name)
        topic = TopicState(name, config, tid)
        topic.created_at = (self.generation, 1 << 62, 0)   # not committed yet: newer than all
        self.batch.created.append(topic)
        self.register(topic)
        self._frame(FrameType.TOPIC_CREATE, topic, frame_body.encode_topic(name, config.to_bytes()))
        return topic

    def _stage_config(self, topic: TopicState, config: TopicConfig) -> None:
        self._save_undo(topic.name)
        was_logged = topic.config.logged
        topic.config = config
        self._frame(FrameType.TOPIC_CREATE, topic,
                    frame_body.encode_topic(topic.name, config.to_bytes()))
        staged_head = topic.next_seq - 1
        if config.logged and not was_logged and staged_head:
            # Records of the ephemeral past are not in the WAL; tell replay where the head is,
            # keeping any reservation still outstanding from an earlier disk period.
            topic.reserved_head = max(topic.reserved_head, staged_head)
            self._frame(FrameType.HEAD_WATERMARK, topic,
                        frame_body.encode_u64(topic.reserved_head), seq=staged_head)

    def _put_topic(self, peer, corr, msg: PutTopic, t0_ns) -> None:
        self._throttle()
        if not valid_topic_name(msg.topic):
            raise invalid(f"invalid topic name {msg.topic!r}")
        config = parse_config(msg.config, msg.topic)
        topic = self.topics.get(msg.topic)
        created = topic is None
        if created:
            topic = self._stage_create(msg.topic, config)
        elif topic.config.type != config.type:
            raise TopicsError("a topic's type cannot change", ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                              {"topic": msg.topic, "existing_type": topic.config.type,
                               "requested_type": config.type})
        elif topic.config != config:
            self._stage_config(topic, config)
        self._write_op(peer, corr, t0_ns, lambda info: {
            "topic": msg.topic, "created": created, "config": config.to_json()})

    def _delete_topic(self, peer, corr, msg: DeleteTopic, t0_ns) -> None:
        self._throttle()
        topic = self.topics.get(msg.topic)
        if topic is None:
            self._write_op(peer, corr, t0_ns, lambda info: {
                "topic": msg.topic, "deleted": False, "routers_removed": []})
            return
        if msg.if_empty and (topic.count or topic.next_seq - 1 > topic.head):
            raise TopicsError(f"topic {msg.topic!r} is not empty", ErrorCode.TOPIC_NOT_EMPTY,
                              {"topic": msg.topic, "count": topic.count})
        self._save_undo(topic.name)
        self._frame(FrameType.TOPIC_DELETE, topic, frame_body.encode_topic(topic.name, b""))
        self.unregister(topic)

        def publish(_info: CommitInfo) -> dict:
            if topic.ram_file:   # committed: an ephemeral topic's records go now
                self.files.remove(topic.ram_file)
            self._woken.add(msg.topic)   # parked readers learn that the topic is gone
            return {"topic": msg.topic, "deleted": True, "routers_removed": []}
        self._write_op(peer, corr, t0_ns, publish)

    def _delete_records(self, peer, corr, msg: DeleteRecords, t0_ns) -> None:
        self._throttle()
        self._write_op(peer, corr, t0_ns, record_delete.stage(self, msg))

    def _get_topic(self, peer, corr, msg: GetTopic, t0_ns) -> None:
        self._retain_named(msg.topic)

        def read(_info: CommitInfo) -> dict:
            topic = self.topics.get(msg.topic)
            if topic is None:
                raise topic_not_found(msg.topic)
            now = self.clock()
            if msg.touch:
                topic.last_read_ts = now
            return topic.state(now)
        self._read_op(peer, corr, t0_ns, read)

    def _list_topics(self, peer, corr, msg: ListTopics, t0_ns) -> None:
        def read(_info: CommitInfo) -> dict:
            names, now = self.names, self.clock()
            start = bisect.bisect_right(names, msg.after) if msg.after else 0
            if msg.prefix:
                start = max(start, bisect.bisect_left(names, msg.prefix))
            limit = max(1, min(msg.limit, 1001))
            page = []
            for name in names[start:start + limit + 1]:
                if not name.startswith(msg.prefix):
                    break
                page.append(name)
            more = len(page) > limit
            topics = [self.topics[name] for name in page[:limit]]
            if msg.touch:
                for topic in topics:
                    topic.last_read_ts = now
            return {"topics": [t.summary(now) for t in topics], "more": more}
        self._read_op(peer, corr, t0_ns, read)

    def _diff(self, peer, corr, msg: Diff, t0_ns) -> None:
        validate_diff(msg)
        self._retain_named(msg.topic)

        def read(_info: CommitInfo) -> dict | None:
            result = self._diff_now(msg)
            if (msg.wait_ms > 0 and not result["records"] and result["tombstone"] is None
                    and result["caught_up"]):
                waiter = Waiter(peer, corr, t0_ns, msg, time.monotonic_ns())
                if self.polls.park(msg.topic, waiter):
                    return None
            return result
        self._read_op(peer, corr, t0_ns, read)

    def _diff_now(self, msg: Diff) -> dict:
        topic = self.topics.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        return diff(topic, self.read_record, msg, self.clock())

    def read_record(self, topic: TopicState, seq: int) -> StoredRecord | None:
        """The record at `seq`, from its segment or the WAL; None for a hole."""
        if seq > topic.absorbed:
            loc = topic.loc(seq)
            return self.files.read(loc) if loc else None
        if seq in topic.deleted:
            return None
        i = topic.segment_of(seq)
        if i < 0:
            loc = topic.ram_past.get(seq) if topic.ram_past else None
            return self.files.read(loc) if loc else None
        rec = self.segments.read(topic.seg_dir, topic.seg_firsts[i], seq)
        if rec.deleted:
            return None
        return StoredRecord(rec.seq, rec.ts, rec.envelope, rec.tag, rec.node, rec.flags)

    @property
    def group_key(self) -> str:
        """The canonical key of this shard's own WAL group."""
        return shard_key(self.generation, self.options.shard)

    def _answer_waiters(self, waiters: list[Waiter]) -> list[tuple[bytes, bytes]]:
        return [self._reply(w.peer, w.corr, w.t0_ns, lambda _info, w=w: self._diff_now(w.msg),
                            CommitInfo())
                for w in waiters]

    def release_polls(self) -> list[tuple[bytes, bytes]]:
        """Answer every parked read now (shutdown)."""
        return self._answer_waiters(self.polls.expire(2**63))

    def expire_polls(self) -> list[tuple[bytes, bytes]]:
        """Answer parked reads whose wait is over (an empty, caught-up page)."""
        return self._answer_waiters(self.polls.expire(time.monotonic_ns()))

    def _retain_named(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is not None and not self._inbox_full():
            retention.stage(self, topic)

    def _retain(self, peer, corr, msg: Retain, t0_ns) -> None:
        self._throttle()
        self._write_op(peer, corr, t0_ns, retention.stage_all(self))

    def _checkpoint(self, peer, corr, msg: Checkpoint, t0_ns) -> None:
        self._throttle()
        self._write_op(peer, corr, t0_ns, stage_barrier(self))

    def _absorbed(self, peer, corr, msg: Absorbed, t0_ns) -> None:
        self._read_op(peer, corr, t0_ns, lambda info: absorb_snapshot(self, msg.snapshot_id))

    def _status(self, peer, corr, msg: Status, t0_ns) -> None:
        self._read_op(peer, corr, t0_ns, lambda info: self.status())

    def live_bytes(self) -> int:
        return sum(topic.bytes for topic in self.topics.values())

    def status(self) -> dict:
        return {"shard": self.options.shard, "shard_count": self.options.shard_count,
                "ready": self.ready, "replay_progress": self.replay_progress,
                "topics": len(self.topics), "long_polls": self.polls.count,
                "statistics": dict(self.stats), "snapshot_id": self.snapshot_id,
                "wal_position": [self.writer.idx, self.writer.tail]}

    # --- append -------------------------------------------------------------------------------

    def _resolve_for_append(self, msg: Append) -> tuple[TopicState, bool]:
        topic = self.topics.get(msg.topic)
        if topic is not None:
            return topic, False
        config = parse_config(msg.config, msg.topic) if msg.config is not None else None
        may_create = msg.create if msg.create is not None else (
            config.auto_create if config is not None else True)
        if not may_create:
            raise topic_not_found(msg.topic)
        return self._stage_create(msg.topic, config or TopicConfig()), True

    def _append(self, peer, corr, msg: Append, t0_ns) -> None:
        self._throttle()
        records = stage_batch(msg.records, msg.node)
        key = msg.idempotency_key
        if key is not None and len(key.encode()) > 256:
            raise invalid("idempotency_key is longer than 256 bytes")
        topic, created = self._resolve_for_append(msg)
        now = self.clock()
        if key is not None:
            entry = topic.dedupe.lookup(key, now, topic.config.idempotency_window_ms)
            if entry is not None:
                self._write_op(peer, corr, t0_ns,
                               lambda info: entry.reply(topic.name, msg.return_seqs))
                return
        if not created:
            retention.stage(self, topic)
            retention.admit(self, topic, records)
        if self.quota.max_total_bytes:
            self.quota.admit(sum(r[PAYLOAD_BYTES] for r in records), self.live_bytes)
        first = topic.next_seq
        offsets = self._stage_records(topic, records, first, now, key)
        if key is not None:
            entry = DedupeEntry(first, first + len(records) - 1, 0, now)
            topic.dedupe.add(key, entry, topic.config.idempotency_window_ms)
            self.batch.dedupe_added.append((topic, key))

        def publish(info: CommitInfo) -> dict:
            self._publish_records(topic, records, first, offsets, info, now)
            if key is not None:
                entry.head_seq = topic.head
            last = first + len(records) - 1
            reply = {"topic": msg.topic, "first_seq": first, "last_seq": last,
                     "head_seq": topic.head, "count": len(records), "created": created,
                     "deduped": False}
            if msg.return_seqs:
                reply["seqs"] = list(range(first, last + 1))
            return reply
        self._write_op(peer, corr, t0_ns, publish)

    def _stage_records(self, topic: TopicState, records: list[StagedRecord], first: int,
                       now: int, key: str | None) -> list[int]:
        """Encode the Append frames (logged classes); returns their offsets in the batch."""
        self._save_undo(topic.name)
        last = first + len(records) - 1
        topic.next_seq = last + 1
        config = topic.config
        if not config.logged:
            return []
        tid = topic.tid
        if config.durability == "disk" and last > topic.reserved_head:
            topic.reserved_head = last + HEAD_RESERVE
            self._frame(FrameType.HEAD_WATERMARK, topic, frame_body.encode_u64(topic.reserved_head))
        durable = config.durability == "fsync"
        flags = FLAG_DURABLE if durable else 0
        offsets = encode_appends(self.batch.buf, tid, first, now, flags, records)
        if key is not None:
            self._frame(FrameType.IDEM_KEY, topic, frame_body.encode_idem_key(key, len(records)),
                        seq=last, sync=durable)
        self.batch.needs_sync |= durable
        return offsets

    def _publish_records(self, topic: TopicState, records: list[StagedRecord], first: int,
                         offsets: list[int], info: CommitInfo, now: int) -> None:
        if offsets:
            base = make_loc(info.file_no, info.offset)
            locs = [base + rel for rel in offsets]
        else:
            locs = self._publish_ephemeral(topic, records, first, now)
        topic.publish(first, locs, sum(r[PAYLOAD_BYTES] for r in records), now)
        if topic.tags is not None:
            for seq, rec in enumerate(records, first):
                if rec[TAG]:
                    topic.tags.add(rec[TAG].decode(), seq)
        if topic.config.cap_records:
            retention.settle(topic, self.read_record)
        self.stats["records"] += len(records)
        self._woken.add(topic.name)

    def _publish_ephemeral(self, topic: TopicState, records: list[StagedRecord], first: int,
                           now: int) -> list[int]:
        if topic.ram is None:
            topic.ram = bytearray()
            topic.ram_file = self.files.add_buffer(topic.ram)
        base = make_loc(topic.ram_file, 0)
        return [base + offset
                for offset in encode_appends(topic.ram, topic.tid, first, now, 0, records)]

    # --- commit ---------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.batch.ops)

    def wants_group_window(self) -> bool:
        """Whether waiting briefly for more writers could share this batch's fsync."""
        return self.batch.needs_sync and self.batch.writes > 1

    def commit(self) -> list[tuple[bytes, bytes]]:
        """Write, sync, publish and answer the current batch; returns (peer, reply) pairs."""
        batch, self.batch = self.batch, Batch()
        info, failure = CommitInfo(), None
        if batch.buf:
            try:
                self._write_batch(batch, info)
            except (OSError, StorageError) as exc:
                failure = self._fail_batch(batch, exc)
            else:
                for topic in batch.created:
                    topic.created_at = (self.generation, info.idx, info.offset)
        if failure is None:   # floors rise only once their watermark is durable
            for topic, floors in batch.retention.values():
                retention.apply(topic, self.read_record, floors)
        replies = []
        for op in batch.ops:
            if failure is not None and op.is_write:
                replies.append((op.peer, encode_error(op.corr, failure)))
                continue
            reply = self._reply(op.peer, op.corr, op.t0_ns, op.fn, info)
            if reply is not None:
                replies.append(reply)
        if self.quota.max_total_bytes and batch.writes:   # reads leave the bytes alone
            self.quota.publish(self.live_bytes())
        woken, self._woken = self._woken, set()
        for name in woken:
            replies += self._answer_waiters(self.polls.wake(name))
        return replies

    def _reply(self, peer: bytes, corr: int, t0_ns: int, fn, info: CommitInfo):
        try:
            body = fn(info)
        except TopicsError as error:
            return peer, encode_error(corr, error)
        except OSError as exc:   # an I/O error of a read: answer it, keep serving
            log.error("event=read_failed shard=%d error=%r", self.options.shard, exc)
            return peer, encode_error(corr, StorageError(f"I/O error: {exc}"))
        if body is None:   # a parked read: answered later
            return None
        body["performance"] = {"server_total_ms": (time.perf_counter_ns() - t0_ns) / 1e6,
                               "wal_append_ms": info.wal_ms, "fsync_ms": info.fsync_ms}
        return peer, encode_reply(corr, body)

    def _write_batch(self, batch: Batch, info: CommitInfo) -> None:
        t0 = time.perf_counter_ns()
        idx, offset = self.writer.write(batch.buf)
        info.file_no, info.idx, info.offset = self.file_no_for(idx), idx, offset
        info.end = offset + len(batch.buf)
        t1 = time.perf_counter_ns()
        info.wal_ms = (t1 - t0) / 1e6
        try:
            if batch.needs_sync:
                self.writer.sync()
                info.fsync_ms = (time.perf_counter_ns() - t1) / 1e6
                self.stats["syncs"] += 1
        except OSError:
            self.writer.undo(offset, len(batch.buf))
            raise
        self.stats["batches"] += 1

    def _fail_batch(self, batch: Batch, exc: BaseException) -> TopicsError:
        self.stats["failed_batches"] += 1
        log.error("event=batch_failed shard=%d error=%r", self.options.shard, exc)
        for name, (topic, next_seq, reserved, config) in batch.undo.items():
            current = self.topics.get(name)
            if current is not None and current is not topic:
                self.unregister(current)
            if topic is not None:
                if current is not topic:
                    self.register(topic)
                topic.next_seq, topic.reserved_head, topic.config = next_seq, reserved, config
        for topic, key in batch.dedupe_added:
            topic.dedupe.discard(key)
        return StorageError(f"WAL commit failed: {exc}")

    def flush_due(self) -> bool:
        """Harden the disk-class tail once per flush interval (a bounded loss window)."""
        if not self.writer.dirty or self.writer.latched:
            return False
        unsynced_ms = (time.monotonic_ns() - self.writer.dirty_since_ns) / 1e6
        if unsynced_ms < self.options.disk_flush_interval_ms:
            return False
        try:
            self.writer.sync()
            self.stats["syncs"] += 1
        except OSError as exc:
            log.error("event=background_sync_failed shard=%d error=%r", self.options.shard, exc)
            self.writer.latched = f"background fdatasync failed: {exc}"
        return True

    def close(self) -> None:
        """Clean shutdown: everything accepted is committed; then sync and release."""
        if self.batch.ops:
            self.commit()
        if not self.writer.latched and self.writer.handle is not None:
            head_marks.seal_reservations(self, pad=False)
        self.writer.close()
        self.files.close()
        self.segments.close()
