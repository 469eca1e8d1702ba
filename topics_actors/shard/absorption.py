"""A shard taking in a durable snapshot: records up to the checkpoint are served from
segment files from now on, and the WAL files wholly before the checkpoint go away.

A topic takes the snapshot's segments only if it existed at the checkpoint (a topic created
after the barrier is a new incarnation the snapshot knows nothing about). A WAL file is
removed only when no topic still holds a location in it, so a disagreement between the
compactor and the shard can cost disk space, never a record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from topics_actors.errors import StorageError
from topics_actors.shard.file_table import OFFSET_BITS
from topics_actors.shard.topic_ledger import accounting_rows
from topics_actors.storage import failpoint, frame_body
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.segment import topic_dir
from topics_actors.storage.snapshot import decode_snapshot, read_file, snapshot_path
from topics_actors.storage.wal_layout import list_wal_files

if TYPE_CHECKING:
    from topics_actors.shard.shard_core import ShardCore

log = logging.getLogger(__name__)


def stage_barrier(core: ShardCore):
    """A checkpoint barrier: a fsync-class CheckpointMark in the core's batch; once durable,
    the reply is the WAL position after it and the shard's exact accounting."""
    core._frame(FrameType.CHECKPOINT_MARK, None, frame_body.encode_u64(0))
    key = core.group_key
    return lambda info: {"generation": core.generation, "group": key, "idx": info.idx,
                         "offset": info.end, "accounting": accounting_rows(core.topics.values())}


def absorb_snapshot(core: ShardCore, snap_id: int) -> dict:
    if snap_id <= core.snapshot_id:
        return {"snapshot_id": core.snapshot_id, "topics": 0, "removed_files": 0}
    try:
        body = decode_snapshot(read_file(core.fs, snapshot_path(core.options.data_dir,
                                                                snap_id)))
    except OSError as exc:
        raise StorageError(f"cannot read snapshot {snap_id}: {exc}") from None
    checkpoint = tuple(body["positions"].get(core.group_key, (0, 0)))
    barrier = (core.generation, *checkpoint)
    topics = 0
    for entry in body["topics"]:
        topic = core.by_tid.get(entry["tid"])
        if topic is None or topic.name != entry["name"] or topic.created_at >= barrier:
            continue
        segments = entry["segments"]
        topic.absorb(entry["absorbed"], topic_dir(core.options.data_dir, entry["dir"]),
                     [s[0] for s in segments], [s[1] for s in segments])
        topics += 1
    core.snapshot_id = snap_id
    removed = _remove_absorbed_files(core, checkpoint[0], core.kept_checkpoint_idx)
    core.kept_checkpoint_idx = checkpoint[0]
    log.info("event=snapshot_absorbed shard=%d snapshot=%d topics=%d removed_files=%d",
             core.options.shard, snap_id, topics, removed)
    return {"snapshot_id": snap_id, "topics": topics, "removed_files": removed}


def _lowest_referenced(core: ShardCore, wal_file_nos: set[int]) -> int:
    """The lowest WAL file number any topic still has a record location in."""
    lowest = 1 << 62
    for topic in core.topics.values():
        for loc in topic.locs:
            file_no = loc >> OFFSET_BITS
            if file_no in wal_file_nos:   # per topic, WAL locations only ever go up
                lowest = min(lowest, file_no)
                break
    return lowest


def _remove_absorbed_files(core: ShardCore, checkpoint_idx: int, unlink_below_idx: int) -> int:
    """Forget WAL files below `checkpoint_idx`; delete those below `unlink_below_idx` (the
    previous snapshot's checkpoint, which must stay replayable should the newest rot)."""
    wal_file_nos = set(core._own_files.values()) | set(core.retired_files)
    lowest = _lowest_referenced(core, wal_file_nos)
    for file_no in [n for n in core.retired_files if n < lowest]:
        core.files.remove(file_no)       # the compactor removes retired groups
        del core.retired_files[file_no]
    for idx, file_no in sorted(core._own_files.items()):
        if idx >= checkpoint_idx:
            break
        if file_no >= lowest:
            log.error("event=absorbed_file_still_referenced shard=%d idx=%d",
                      core.options.shard, idx)
            return 0
        core.files.remove(file_no)
        del core._own_files[idx]
    failpoint.hit("absorb::before_wal_remove")
    removed = 0
    for idx, path in list_wal_files(core.fs, core.wal_dir):
        if idx >= min(unlink_below_idx, checkpoint_idx):
            break
        try:
            core.fs.remove(path)
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as exc:   # the next snapshot taken in tries again
            log.error("event=wal_remove_failed path=%s error=%r", path, exc)
            break
    return removed
