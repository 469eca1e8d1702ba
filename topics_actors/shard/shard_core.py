"""The shard's pure core: requests in, staged WAL frames, one commit, replies out.

The socket shell feeds every request of one loop turn to submit(), then calls commit():
the batch is written with one write() and, if it holds fsync-class frames, one fdatasync;
only then are its effects published (in arrival order) and its replies produced. A failed
write or sync rolls every staged change back, erases the bytes and fails every write of the
batch. Reads queued in the same turn run after the publish, so nothing uncommitted is seen.

The core only wires the narrow parts together: the topic registry, the WAL file set, the
record reader, the batch stager, and one handler per request kind (topic_admin,
record_append, record_delete, diff_read, range_scan, retention, absorption, queue_ops).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from topics_actors.allocator_policy import release_free_memory
from topics_actors.config import ShardOptions
from topics_actors.errors import (
    ErrorCode, ProtocolError, StorageError, TopicsError, storage_error,
)
from topics_actors.ledger import retention_rules
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol import encode_error, head_table
from topics_actors.protocol.head_table import Slot
from topics_actors.protocol.messages import (
    Absorbed, Ack, Append, Checkpoint, Checksum, Claim, DeleteRecords, DeleteTopic, Diff, Extend,
    GetTopic, Held, ListTopics, Nack, PutTopic, RepairTopic, Retain, Scan, Status, StreamLease,
    WatchCreate, WatchCursor, WatchOpen,
)
from topics_actors.protocol.messages import DeleteRouters, ListRouters, PutRouter, RouterSync
from topics_actors.shard import (
    absorption, copy_checksum, diff_read, head_marks, range_scan, record_delete, retention,
    topic_admin,
)
from topics_actors.shard.replication import replica_report
from topics_actors.shard.batch_stager import (
    Batch, BatchStager, CommitInfo, Op, Staged, fail_with, read_op, roll_back,
)
from topics_actors.shard.byte_quota import ByteQuota
from topics_actors.shard.checkpoint_window import CheckpointWindow
from topics_actors.shard.long_poll import LongPolls
from topics_actors.shard.queues.claim_windows import ClaimPass
from topics_actors.shard.commit_window import CommitWindow
from topics_actors.shard.head_board import HeadBoard
from topics_actors.shard.queues.dead_letter_moves import MoveDone
from topics_actors.shard.quarantine_book import QuarantineBook
from topics_actors.shard.queues.queue_ops import QueueOps
from topics_actors.shard.record_append import RecordAppend
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replay import Replay
from topics_actors.shard.reply_desk import Reply, ReplyDesk
from topics_actors.shard.replication.replica_book import ReplicaBook
from topics_actors.shard.replication.replica_rules import ReplicaRules
from topics_actors.shard.routers.router_book import RouterBook, RouterPass
from topics_actors.shard.shard_stats import ShardStats
from topics_actors.shard.stream_leases import StreamLeases
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.shard.wal_file_set import WalFileSet
from topics_actors.shard.watch_sessions import WatchSessions
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import SegmentReader
from topics_actors.storage.segment_tier import Tiers
from topics_actors.topic_identity import topic_id

log = logging.getLogger(__name__)

Handler = Callable[[object], Staged]     # a request -> (is write, its answer after commit)
FAILURE_LOG_INTERVAL_S = 1.0    # a full disk fails every batch: one log line a second


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ShardCore:
    def __init__(self, fs: Fs, options: ShardOptions, clock: Callable[[], int] = now_ms):
        self.fs = fs
        self.options = options
        self.clock = clock
        self.stats = ShardStats()
        self._failure_logged_at = -FAILURE_LOG_INTERVAL_S
        self.registry = TopicRegistry(options.shard, options.shard_count)
        self.wal = WalFileSet(fs, options, self.stats)
        self.tiers = Tiers(options.data_dir, options.cold_dir)
        segments = SegmentReader(fs, tiers=self.tiers)
        self.reader = RecordReader(self.wal.files, segments)
        self.stager = BatchStager(clock, self.stats)
        self.window = CommitWindow()           # the group-commit window (shard_server)
        self.quota = ByteQuota(options.quota_file, options.shard, options.max_total_bytes)
        self.polls = LongPolls()
        self.watch = WatchSessions(clock)
        self.stream_leases = StreamLeases(clock)      # SSE streams of no watch session
        self.feed_pending: set[str] = set()     # topics woken since the feed last published
        self.ready = False
        self.quarantine = QuarantineBook(fs, options.shard, options.recovery_on_mismatch,
                                         options.data_dir)
        self.replay_progress = 0.0
        self.appends = RecordAppend(self.stager, self.registry, self.reader, self.quota,
                                    self.stats)
        self.queues = QueueOps(self.stager, self.registry, self.reader, self.appends)
        self.routers = RouterBook(self.stager, self.registry, self.appends)
        self.checkpoints = CheckpointWindow()
        self.replicas = ReplicaBook(options.node_id, self.stager, self.registry, self.reader,
                                    self.wal.files.remove, checkpoints=self.checkpoints)
        self.replica_rules = ReplicaRules(self.replicas, self.registry)
        self.replicated = self.replicas.enabled     # a cluster node (TOPICS_ZK)
        self.routers.sources_owned = not self.replicated
        if self.replicated:
            self.queues.replication = self.replicas.leader
        self.replies = ReplyDesk(options.shard, self.polls, self.replicas)
        self.heads: HeadBoard | None = None    # caught-up reads for the gateways (open_heads)
        self._handlers = self._handler_table()

    def open_heads(self, path: str) -> None:
        """Publish caught-up reads' answers at `path` (shard/head_board.py); a cluster
        node does not, nor a CPU the table's seqlock cannot trust."""
        if not self.replicated and head_table.supported():
            try:
                self.heads = HeadBoard(path, self.quarantine.topics.__contains__)
            except OSError as exc:      # every read goes to the shard, as without a table
                log.warning("event=head_table_unavailable shard=%d path=%s error=%r",
                            self.options.shard, path, exc)

    def _claim_head(self, topic: TopicState) -> Slot | None:
        return self.heads.claim(topic) if self.heads is not None else None

    def _fold_reads(self, topic: TopicState) -> None:
        if self.heads is not None:
            self.heads.fold_read_ms(topic)

    def _refresh_heads(self, names=None) -> None:
        """Publish `names`' heads again (None: every topic with a slot)."""
        if self.heads is not None:
            if names is None:
                self.heads.refresh_all(self.registry.get)
            else:
                self.heads.refresh(self.registry.get, names)

    def _handler_table(self) -> dict[type, Handler]:
        """Each request kind -> the function that stages it and returns (whether it
        writes, the function that answers it after the commit). A cluster node's table
        adds replication's rules (ReplicaRules.handlers); a single node's asks nothing of
        replication."""
        stager, registry, reader = self.stager, self.registry, self.reader
        queues, routers, watch, leases = self.queues, self.routers, self.watch, \
            self.stream_leases
        drop_buffer = self.wal.files.remove
        table: dict[type, Handler] = {
            Append: self.appends.append,
            PutTopic: lambda m: topic_admin.put(stager, registry, m),
            DeleteTopic: lambda m: topic_admin.delete(stager, registry, m, drop_buffer),
            GetTopic: lambda m: topic_admin.get(stager, registry, reader, m, self._fold_reads),
            ListTopics: lambda m: topic_admin.list_page(stager, registry, m, self._fold_reads),
            Diff: lambda m: diff_read.diff_request(stager, registry, reader, m,
                                                   routers, self._claim_head),
            Scan: lambda m: range_scan.scan_request(stager, registry, reader, m),
            DeleteRecords: lambda m: record_delete.request(stager, registry, reader, m),
            Retain: lambda m: retention.retain_request(stager, reader, registry),
            Checkpoint: self._barrier,
            Absorbed: self._absorbed,
            Status: lambda m: read_op(lambda info: self.status()),
            WatchCreate: lambda m: read_op(lambda info: watch.create(m)),
            WatchOpen: lambda m: read_op(lambda info: watch.open(m)),
            WatchCursor: lambda m: read_op(lambda info: watch.cursor(m)),
            StreamLease: lambda m: read_op(lambda info: leases.renew(m)),
            Claim: queues.claim,
            Ack: queues.ack,
            Nack: queues.nack,
            Extend: queues.extend,
            Held: queues.held,
            MoveDone: queues.moves.done,
            ClaimPass: queues.claim_pass,
            PutRouter: routers.put,
            ListRouters: routers.list,
            DeleteRouters: routers.delete,
            RouterPass: routers.forward,
            RouterSync: routers.sync,
            RepairTopic: lambda m: read_op(lambda info: self._repair(m.topic)),
            Checksum: lambda m: copy_checksum.request(registry, reader, m),
        }
        if self.replicated:
            table = self.replica_rules.handlers(table)
        return table

    def _repair(self, name: str) -> dict:
        body = self.quarantine.repair(name)
        self._refresh_heads((name,))
        return body

    def _barrier(self, msg: Checkpoint) -> Staged:
        self.quarantine.check_checkpoint()
        staged = absorption.barrier_request(self.stager, self.wal, self.registry)
        self.checkpoints.barrier()
        return staged

    def _absorbed(self, msg: Absorbed) -> Staged:
        """Take in a snapshot; it closes the checkpoint window (checkpoint_window.py)."""
        wal, barriers = self.wal, self.checkpoints.barriers
        is_write, fn = absorption.absorb_request(self.fs, self.options.data_dir, wal,
                                                 self.registry, self.reader.segments,
                                                 msg.snapshot_id)

        def take_in(info: CommitInfo) -> dict:
            before = wal.snapshot_id
            body = fn(info)
            if wal.snapshot_id > before:
                self.checkpoints.absorbed(barriers)
                release_free_memory()   # the decoded snapshot, and the WAL index it freed
                self._refresh_heads()
            return body
        return is_write, take_in

    def replay(self) -> Replay:
        """The recovery of this shard's state from its snapshot and WAL (run it first)."""
        return Replay(self.fs, self.options, self.registry, self.wal, self.reader, self.clock,
                      self.quarantine, self.checkpoints)

    # --- request intake -------------------------------------------------------------------

    def submit(self, peer: bytes, corr: int, msg, t0_ns: int) -> None:
        self.stats.requests += 1
        try:
            name = getattr(msg, "topic", None)
            if name is not None and not self.registry.owns(topic_id(name)):
                raise TopicsError(f"topic {name!r} belongs to another shard",
                                  ErrorCode.NOT_READY,
                                  {"reason": "wrong_shard", "shard": self.options.shard})
            if name is not None and type(msg) is not RepairTopic:
                self.quarantine.check(name)
            handler = self._handlers.get(type(msg))
            if handler is None:     # a kind for another process (a heartbeat, a placement)
                raise ProtocolError(f"a shard does not serve {msg.KIND} requests")
            is_write, fn = handler(msg)
        except TopicsError as error:
            is_write, fn = False, fail_with(error)
        self.stager.add(Op(peer, corr, t0_ns, is_write, fn))

    def submit_due_claims(self) -> None:
        """Stage the pass of every claim window that is due (claim coalescing)."""
        for msg in self.queues.windows.due(self.clock()):
            self.submit(b"", 0, msg, time.perf_counter_ns())

    def ms_until_claims(self) -> int | None:
        return self.queues.windows.ms_until_next(self.clock())

    def submit_error(self, peer: bytes, corr: int, error: TopicsError, t0_ns: int) -> None:
        self.stager.add(Op(peer, corr, t0_ns, False, fail_with(error)))

    def has_work(self) -> bool:
        return bool(self.stager.batch.ops)

    def wants_group_window(self) -> bool:
        """Whether waiting briefly for more writers could share this batch's fsync."""
        batch = self.stager.batch
        return batch.needs_sync and batch.writes > 1 and not self.window.complete(batch.writes)

    def gathered_enough(self) -> bool:
        """Whether the writers of the previous synced commit are all back."""
        return self.window.complete(self.stager.batch.writes)

    # --- commit ---------------------------------------------------------------------------

    def commit(self) -> list[Reply]:
        """Write, sync, publish and answer the current batch; returns (peer, reply) pairs."""
        batch = self.stager.take()
        info, failure = CommitInfo(), None
        if batch.buf:
            try:
                self.wal.append(batch.buf, batch.needs_sync, info)
            except (OSError, StorageError) as exc:
                failure = self._fail(batch, exc)
            else:
                if batch.needs_sync:
                    self.window.synced(info.fsync_ms, batch.writes)
                for topic in batch.created:
                    topic.created_at = (self.wal.generation, info.idx, info.offset)
        if failure is None:   # floors rise only once their watermark is durable
            for topic, floors in batch.retention.values():
                retention_rules.apply(topic, self.reader.read, floors)
        replies, reply_to = [], self.replies.reply
        for op in batch.ops:
            if failure is not None and op.is_write:
                replies.append((op.peer, encode_error(op.corr, failure)))
                continue
            reply = reply_to(op.peer, op.corr, op.t0_ns, op.fn, info)
            if reply is not None:
                replies.append(reply)
        if self.heads is not None:
            self.heads.refresh(self.registry.get, batch.undo, batch.retention, batch.touched)
        if self.quota.max_total_bytes and batch.writes:   # reads leave the bytes alone
            self.quota.publish(self.registry.live_bytes())
        woken = self.replicas.after_commit(info.woken) if self.replicated else info.woken
        polls = self.polls
        for name in woken:
            if polls.count:
                replies += self.replies.answer_waiters(polls.wake(name))
            if name[0] != "\0":   # from \0 on: internal wake-ups (claim windows), not topics
                self.feed_pending.add(name)
        if self.replicated:
            replies += self.replies.released()
        return replies

    def _fail(self, batch: Batch, exc: BaseException) -> TopicsError:
        """A batch the WAL refused: nothing of it happened. A full disk answers 507
        `insufficient_storage` until space returns; the log says so once per second."""
        self.stats.failed_batches += 1
        now = time.monotonic()
        if now - self._failure_logged_at >= FAILURE_LOG_INTERVAL_S:
            log.error("event=batch_failed shard=%d failed_batches=%d error=%r",
                      self.options.shard, self.stats.failed_batches, exc)
            self._failure_logged_at = now
        roll_back(batch, self.registry)
        self.replicas.follower.failed()
        return storage_error(f"WAL commit failed: {exc}", exc)

    # --- replies that wait (reply_desk.py) ----------------------------------------------

    def released_replies(self) -> list[Reply]:
        """What replication lets go before any commit (ReplyDesk.released)."""
        return self.replies.released() if self.replicated else []

    def release_polls(self) -> list[Reply]:
        """Answer every parked read now (shutdown)."""
        return self.replies.answer_waiters(self.polls.expire(2**63))

    def expire_polls(self) -> list[Reply]:
        """Answer parked reads whose wait is over (an empty, caught-up page)."""
        return self.replies.answer_waiters(self.polls.expire(time.monotonic_ns()))

    # --- upkeep ---------------------------------------------------------------------------

    def ms_until_flush(self) -> float | None:
        return self.wal.ms_until_flush(self.options.disk_flush_interval_ms)

    def flush_due(self) -> bool:
        """Harden the disk-class tail once per flush interval (a bounded loss window)."""
        return self.wal.flush_due(self.options.disk_flush_interval_ms)

    def audit_segments(self, budget_ms: float | None) -> None:
        """Check queued segments for up to `budget_ms` (None: all); see quarantine_book.
        It may quarantine or repair a topic: the head table is written again."""
        audited = bool(self.quarantine.unaudited)
        self.quarantine.audit_segments(self.registry, self.fs.map_read,
                                       lambda d, first: self.tiers.resolve(self.fs, d, first),
                                       budget_ms)
        if audited:
            self._refresh_heads()

    def unsettled(self) -> dict[str, int]:
        """Replicated copies that recovered in the leader epoch they name and may not lead
        in it (shard/replication/replica_book.py); {} before the shard is ready."""
        return self.replicas.unsettled() if self.ready and self.replicas.enabled else {}

    def status(self) -> dict:
        writer = self.wal.writer
        return {"shard": self.options.shard, "shard_count": self.options.shard_count,
                "ready": self.ready, "replay_progress": self.replay_progress,
                "topics": len(self.registry), "long_polls": self.polls.count,
                "ram_bytes": self.registry.ram_bytes(),
                **self.routers.figures(),
                **replica_report.figures(self.replicas),
                "statistics": self.stats.as_dict(), "snapshot_id": self.wal.snapshot_id,
                "wal_position": [writer.idx, writer.tail], **self.quarantine.status(),
                **self.stream_leases.add_to(self.watch.census())}

    def close(self) -> None:
        """Clean shutdown: everything accepted is committed; then sync and release."""
        if self.has_work():
            self.commit()
        writer = self.wal.writer
        if not writer.latched and writer.handle is not None:
            head_marks.seal_reservations(self.registry, writer, self.clock, pad=False)
        self.wal.close()
        self.reader.close()
        if self.heads is not None:
            self.heads.close()
