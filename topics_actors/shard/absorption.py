"""A shard taking in a durable snapshot: records up to the checkpoint are served from
segment files from now on, and the WAL files wholly before the checkpoint go away.

A topic takes the snapshot's segments only if it existed at the checkpoint (a topic created
after the barrier is a new incarnation the snapshot knows nothing about). A WAL file is
removed only when no topic still holds a location in it, so a disagreement between the
compactor and the shard can cost disk space, never a record.
"""

from __future__ import annotations

import logging

from topics_actors.errors import ErrorCode, InvariantViolation, StorageError, TopicsError
from topics_actors.ledger.topic_ledger import accounting_rows
from topics_actors.shard.batch_stager import BatchStager, Staged, read_op, write_op
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.shard.wal_file_set import WalFileSet
from topics_actors.storage import frame_body
from topics_actors.storage.file_table import OFFSET_BITS
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import SegmentReader, topic_dir
from topics_actors.storage.snapshot import decode_snapshot, read_file, snapshot_path

log = logging.getLogger(__name__)


def barrier_request(stager: BatchStager, wal: WalFileSet, registry: TopicRegistry) -> Staged:
    """A checkpoint barrier: a fsync-class CheckpointMark in the batch; once durable, the
    reply is the WAL position after it and the shard's exact accounting."""
    stager.throttle()
    stager.frame(FrameType.CHECKPOINT_MARK, None, frame_body.encode_u64(0))
    key = wal.group_key

    def answer(info) -> dict:
        _check_durable(wal, (info.idx, info.end), "a checkpoint barrier answered at")
        return {"generation": wal.generation, "group": key, "idx": info.idx,
                "offset": info.end, "accounting": accounting_rows(registry)}
    return write_op(answer)


def _check_durable(wal: WalFileSet, position: tuple[int, int], what: str) -> None:
    """A checkpoint never passes what this shard's WAL holds durably: after a power loss
    the shard would write new records below it, and no later checkpoint would take them."""
    if tuple(position) > wal.writer.durable_end:
        raise InvariantViolation(f"{what} WAL position {tuple(position)}, past the shard's "
                                 f"durable end {wal.writer.durable_end}")


def absorb_request(fs: Fs, data_dir: str, wal: WalFileSet, registry: TopicRegistry,
                   maps: SegmentReader, snap_id: int) -> Staged:
    """`absorbed`: take in a durable snapshot (a read: it logs nothing)."""
    return read_op(lambda info: absorb_snapshot(fs, data_dir, wal, registry, maps, snap_id))


def absorb_snapshot(fs: Fs, data_dir: str, wal: WalFileSet, registry: TopicRegistry,
                    maps: SegmentReader, snap_id: int) -> dict:
    """Take in snapshot `snap_id`; `maps` unmaps the segments no topic lists any more."""
    if snap_id <= wal.snapshot_id:
        return {"snapshot_id": wal.snapshot_id, "topics": 0, "removed_files": 0}
    try:
        body = decode_snapshot(read_file(fs, snapshot_path(data_dir, snap_id)))
    except FileNotFoundError:
        raise TopicsError(f"there is no snapshot {snap_id}", ErrorCode.NOT_FOUND) from None
    except OSError as exc:
        raise StorageError(f"cannot read snapshot {snap_id}: {exc}") from None
    checkpoint = tuple(body["positions"].get(wal.group_key, (0, 0)))
    _check_durable(wal, checkpoint, f"snapshot {snap_id} checkpoints")
    barrier = (wal.generation, *checkpoint)
    topics = 0
    for entry in body["topics"]:
        topic = registry.by_tid.get(entry["tid"])
        if topic is None or topic.name != entry["name"] or topic.created_at >= barrier:
            continue
        if entry["absorbed"] > topic.head:
            raise InvariantViolation(f"snapshot {snap_id} absorbed {topic.name!r} to seq "
                                     f"{entry['absorbed']}, past its head {topic.head}")
        segments = entry["segments"]
        topic.absorb(entry["absorbed"], topic_dir(data_dir, entry["dir"]),
                     [s[0] for s in segments], [s[1] for s in segments])
        topics += 1
    maps.keep_only({(topic.seg_dir, first) for topic in registry
                    for first in topic.seg_firsts})
    wal.snapshot_id = snap_id
    removed = 0
    lowest = _lowest_referenced(registry, wal.wal_file_nos())
    if wal.forget_absorbed(checkpoint[0], lowest):
        # The previous snapshot's checkpoint must stay replayable should the newest rot.
        removed = wal.remove_below(min(wal.kept_checkpoint_idx, checkpoint[0]))
    wal.kept_checkpoint_idx = checkpoint[0]
    log.info("event=snapshot_absorbed shard=%d snapshot=%d topics=%d removed_files=%d",
             wal.shard, snap_id, topics, removed)
    return {"snapshot_id": snap_id, "topics": topics, "removed_files": removed}


def _lowest_referenced(registry: TopicRegistry, wal_file_nos: set[int]) -> int:
    """The lowest WAL file number any topic still has a record location in."""
    lowest = 1 << 62
    for topic in registry:
        for loc in topic.locs:
            file_no = loc >> OFFSET_BITS
            if file_no in wal_file_nos:   # per topic, WAL locations only ever go up
                lowest = min(lowest, file_no)
                break
    return lowest
