"""An `append` in a shard's batch: validate, admit, assign seqs, stage the frames; publish
the records (index, counters, tags, waiters) once the batch is durable.

Seqs are assigned at staging (`next_seq`) and published in the same order, so a topic's
head only ever moves to the next seq. Logged classes stage Append frames in the batch;
ephemeral records are framed into the topic's RAM buffer at publish. A disk-class topic
reserves seqs ahead of its head (HeadWatermark) before it hands them out, so a machine
crash that loses an unsynced tail leaves holes, never a seq issued twice.
"""

from __future__ import annotations

from collections.abc import Callable

from topics_actors.errors import InvariantViolation, invalid, topic_not_found
from topics_actors.ledger import retention_rules
from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.dedupe_index import DedupeEntry
from topics_actors.ledger.topic_state import TopicState
from topics_actors.limits import IDEMPOTENCY_KEY_BYTES_MAX
from topics_actors.protocol.messages import Append
from topics_actors.record_batch import TAG, StagedRecord, payload_total, stage_batch
from topics_actors.shard import ram_buffer, retention
from topics_actors.shard.batch_stager import (
    BatchStager, CommitInfo, Offsets, Staged, encode_staged, locations, write_op,
)
from topics_actors.shard.byte_quota import ByteQuota
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.shard_stats import ShardStats
from topics_actors.shard.topic_admin import create_topic
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.file_table import make_loc
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import TopicConfig, parse_config

HEAD_RESERVE = 256        # seqs a disk-class HeadWatermark reserves past the staged head


class RecordAppend:
    def __init__(self, stager: BatchStager, registry: TopicRegistry, reader: RecordReader,
                 quota: ByteQuota, stats: ShardStats):
        self.stager = stager
        self.registry = registry
        self.reader = reader
        self.quota = quota
        self.stats = stats

    def _resolve(self, msg: Append) -> tuple[TopicState, bool]:
        topic = self.registry.get(msg.topic)
        if topic is not None:
            return topic, False
        config = parse_config(msg.config, msg.topic) if msg.config is not None else None
        may_create = msg.create if msg.create is not None else (
            config.auto_create if config is not None else True)
        if not may_create:
            raise topic_not_found(msg.topic)
        return create_topic(self.stager, self.registry, msg.topic,
                            config or TopicConfig()), True

    def append(self, msg: Append) -> Staged:
        stager = self.stager
        stager.throttle()
        records = stage_batch(msg.records, msg.node)
        key = msg.idempotency_key
        if key is not None and len(key.encode()) > IDEMPOTENCY_KEY_BYTES_MAX:
            raise invalid(f"idempotency_key is longer than {IDEMPOTENCY_KEY_BYTES_MAX} bytes")
        topic, created = self._resolve(msg)
        now = stager.clock()
        if key is not None:
            entry = topic.dedupe.lookup(key, now, topic.config.idempotency_window_ms)
            if entry is not None:
                return write_op(lambda info: entry.reply(topic.name, msg.return_seqs))
        first, offsets = self._admit(topic, records, created, now, key)
        if key is not None:
            # head_seq 0: a retry is answered with the batch's last seq as its head
            topic.dedupe.add(key, DedupeEntry(first, first + len(records) - 1, 0, now),
                             topic.config.idempotency_window_ms)
            stager.batch.dedupe_added.append((topic, key))

        def publish(info: CommitInfo) -> dict:
            self._publish(topic, records, first, offsets, info, now)
            last = first + len(records) - 1
            reply = {"topic": msg.topic, "first_seq": first, "last_seq": last,
                     "head_seq": topic.head, "count": len(records), "created": created,
                     "deduped": False}
            if msg.return_seqs:
                reply["seqs"] = list(range(first, last + 1))
            return reply
        return write_op(publish)

    def _admit(self, topic: TopicState, records: list[StagedRecord], created: bool, now: int,
               key: str | None) -> tuple[int, Offsets | None]:
        """Capacity and quota checks (raise, nothing staged), then the frames: (first seq,
        frame offsets)."""
        if not created:
            retention.plan(self.stager, self.reader, topic)
            retention.admit(self.stager, self.reader, topic, records)
        if self.quota.max_total_bytes:
            self.quota.admit(payload_total(records), self.registry.live_bytes)
        first = topic.next_seq
        return first, self._frame_records(topic, records, first, now, key)

    def append_copies(self, topic: TopicState, records: list[StagedRecord]
                     ) -> Callable[[CommitInfo], None]:
        """Stage records built by the shard itself (a router's copies, shard/routers/router_book.py)
        into an existing topic, admitted like an append; returns their publish."""
        self.stager.throttle()
        now = self.stager.clock()
        first, offsets = self._admit(topic, records, False, now, None)
        return lambda info: self._publish(topic, records, first, offsets, info, now)

    def _frame_records(self, topic: TopicState, records: list[StagedRecord], first: int,
                       now: int, key: str | None) -> Offsets | None:
        """Encode the records' frames (logged classes; None for the others): where they are
        in the batch (batch_stager.encode_staged)."""
        stager = self.stager
        if first != topic.next_seq or first <= topic.head:
            raise InvariantViolation(f"{topic.name!r}: records framed at seq {first}, not at "
                                     f"its next seq {topic.next_seq} above head {topic.head}")
        stager.save_undo(topic.name, topic)
        last = first + len(records) - 1
        durability = topic.config.durability
        if not durability.logged:
            topic.next_seq = last + 1
            return None
        if durability.reserves_head and last > topic.reserved_head:
            topic.reserved_head = last + HEAD_RESERVE
            stager.frame(FrameType.HEAD_WATERMARK, topic,
                         frame_body.encode_u64(topic.reserved_head))
        if durability.reserves_head and last > topic.reserved_head:
            raise InvariantViolation(f"{topic.name!r}: seq {last} handed out above its "
                                     f"reservation {topic.reserved_head}")
        sync = durability.acks_after_fsync
        offsets = stager.appends(topic, first, now, records, sync)
        topic.next_seq = last + 1
        if key is not None:
            stager.frame(FrameType.IDEM_KEY, topic, frame_body.encode_idem_key(key, len(records)),
                         seq=last, sync=sync)
        return offsets

    def _publish(self, topic: TopicState, records: list[StagedRecord], first: int,
                 offsets: Offsets | None, info: CommitInfo, now: int) -> None:
        if offsets is not None:
            locs = locations(make_loc(info.file_no, info.offset), offsets, len(records))
        else:
            locs = self._publish_ephemeral(topic, records, first, now)
        if len(locs) != len(records):
            raise InvariantViolation(f"{topic.name!r}: {len(records)} records published at "
                                     f"{len(locs)} locations")
        topic.publish(first, locs, payload_total(records), now)
        if topic.tags is not None:
            for seq, rec in enumerate(records, first):
                if rec[TAG]:
                    topic.tags.add(rec[TAG].decode(), seq)
        if topic.config.cap_records:
            retention_rules.settle(topic, self.reader.read)
        if topic.tags is not None:
            topic.tags.trim(live_floor(topic))
        if topic.ram is not None:
            ram_buffer.trim(topic, self.reader.files)
        self.stats.records += len(records)
        info.woken.add(topic.name)

    def _publish_ephemeral(self, topic: TopicState, records: list[StagedRecord], first: int,
                           now: int):
        ram_buffer.open_chunk(topic, self.reader.files, first)
        return locations(make_loc(topic.ram_file, 0),
                         encode_staged(topic.ram, topic.tid, first, now, 0, records),
                         len(records))
