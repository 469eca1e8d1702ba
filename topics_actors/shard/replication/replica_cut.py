"""A follower's diverged copy cut back in place (docs/CLUSTER.md, "When a copy diverged").

The epoch query settles where the local log stops agreeing with the leader's
(cluster/epoch_cache.py); every record after that seq is one the leader never had. The cut
is a Truncate frame, synced with its batch, applied by ledger/log_truncation.py here and by
every reader of the WAL alike (recovery, compactor, fsck); fetching then goes on from the
cut, so healing a copy costs the divergent suffix, not the topic.

It is made only when nothing can go wrong in place (`refusal`): the records to drop are all
in WAL files not absorbed into segments, no checkpoint is between its barrier and the
snapshot taken in (it could seal the records into segments the shard would then serve over
the leader's), the cut is not below the replica's high watermark (those records were never
acked with `acks: all` nor seen by a reader), the topic keeps its records in the WAL (not
a RAM buffer), and nothing else of the topic is staged in the batch. Otherwise the caller
drops the whole copy and fetches it again (replica_book.py `_reset`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.cluster.follower_fetch import FollowerFetch
from topics_actors.errors import InvariantViolation
from topics_actors.ledger import log_truncation
from topics_actors.ledger.topic_state import TopicState
from topics_actors.shard import ram_buffer, topic_admin
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, write_op
from topics_actors.shard.checkpoint_window import CheckpointWindow
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication.replica_ops import ops_of
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType

log = logging.getLogger(__name__)


class ReplicaCut:
    def __init__(self, stager: BatchStager, reader: RecordReader,
                 checkpoints: CheckpointWindow):
        self.stager = stager
        self.reader = reader
        self.checkpoints = checkpoints
        self.truncated = 0             # copies cut in place
        self.resets = 0                # copies dropped whole and fetched again
        self.refused: dict[str, int] = {}   # reason -> copies reset whole instead

    def diverged(self, topic: TopicState, fetch: FollowerFetch, last: int,
                 epochs: list[tuple[int, int]], reset: Callable[[str], Staged]) -> Staged:
        """The copy holds records after `last` the leader never had: cut them in place
        when that is safe, else `reset(reason)` drops the whole copy."""
        reason = self.refusal(topic, fetch, last)
        if reason is not None:
            return reset(reason)
        return self.truncate(topic, fetch, last, epochs)

    def refusal(self, topic: TopicState, fetch: FollowerFetch, last: int) -> str | None:
        """Why the copy cannot be cut after `last` in place now (None: it can)."""
        reason = log_truncation.refusal(topic, last)
        if reason is None and last < fetch.hw_seq:
            reason = "below_hw"
        if reason is None and self.checkpoints.open:
            reason = "checkpoint_open"
        batch = self.stager.batch
        if reason is None and (topic.name in batch.undo or topic.name in batch.retention):
            reason = "staged"
        if reason is not None:
            self.refused[reason] = self.refused.get(reason, 0) + 1
        return reason

    def truncate(self, topic: TopicState, fetch: FollowerFetch, last: int,
              epochs: list[tuple[int, int]]) -> Staged:
        """Cut the copy after `last` (the fetch state machine already stands at last + 1).
        `epochs`: the epoch cache before the leader's answer, put back should the batch
        fail, and then the follower asks again where the logs part."""
        head = topic.head
        if last < (topic.hw or 0) or last < fetch.hw_seq:
            raise InvariantViolation(f"a cut of {topic.name!r} after seq {last}, below its "
                                     f"high watermark {max(topic.hw or 0, fetch.hw_seq)}")
        self.stager.save_undo(topic.name, topic)
        self.stager.frame(FrameType.TRUNCATE, topic, frame_body.encode_u64(last), seq=last)
        dropped = log_truncation.cut(topic, last, self.reader.read, undoable=True)
        dropped.epochs = epochs

        def undo() -> None:             # the batch failed: the frame is not in the WAL
            log_truncation.restore(topic, dropped)
            fetch.leader_behind()
        self.stager.batch.undo_fns.append(undo)
        self.truncated += 1
        log.warning("event=replica_truncated topic=%s head=%d last=%d records=%d hw=%d",
                    topic.name, head, last, dropped.records, topic.hw or 0)

        def publish(info: CommitInfo) -> dict:
            info.woken.add(topic.name)
            return {"truncated": dropped.records, "last": last}
        return write_op(publish)

    def reset(self, registry: TopicRegistry, topic: TopicState, ops_applied: int,
              reason: str, drop_buffer: Callable[[int], None]) -> tuple[Staged, TopicState]:
        """Drop the local copy, which diverged below its head (not cut in place: `reason`)
        or lacks ops the leader no longer holds, and start it again empty (returned: the
        caller follows it from seq 1); its ops start after `ops_applied`, the leader's,
        whose effects the records it fetches from now on already show."""
        log.warning("event=replica_reset topic=%s head=%d ops_applied=%d reason=%s",
                    topic.name, topic.head, ops_applied, reason)
        self.resets += 1
        stager = self.stager
        stager.save_undo(topic.name, topic)
        stager.frame(FrameType.TOPIC_DELETE, topic, frame_body.encode_topic(topic.name, b""))
        registry.unregister(topic)
        fresh = topic_admin.create_topic(stager, registry, topic.name, topic.config)
        fresh.epochs, fresh.hw, fresh.follower = EpochCache(), 0, True
        if ops_applied:
            stager.frame(FrameType.OPS_COMMIT, fresh, frame_body.encode_u64(0),
                         seq=ops_applied)
            ops_of(fresh).take_committed(ops_applied)

        def publish(info: CommitInfo) -> dict:
            ram_buffer.drop_all(topic, drop_buffer)
            info.woken.add(topic.name)
            return {"reset": True}
        return write_op(publish), fresh
