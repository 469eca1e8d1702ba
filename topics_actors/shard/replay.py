"""Recovery of one shard from the WAL: replay every group it must read, truncate its own
torn tail, turn disk-class head reservations into holes, then open the writer.

Replay order is the layout's (retired generations oldest first, then the shard's own group),
and within a group file order, then frame order. A file's log ends at its first invalid
frame; later files are still read, but an Append whose seq is not head + 1 is ignored, so
what a corruption loses is a suffix of a topic, never a middle.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterator

from topics_actors.shard.file_table import make_loc
from topics_actors.shard.shard_core import ShardCore
from topics_actors.shard.dedupe_index import DedupeEntry
from topics_actors.shard.topic_state import TopicState
from topics_actors.storage import failpoint, frame_body
from topics_actors.storage.frame import Frame, FrameType, envelope_payload_bytes
from topics_actors.storage.wal_layout import list_wal_files, replay_groups
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_config import TopicConfig
from topics_actors.topic_identity import topic_id

log = logging.getLogger(__name__)

PROGRESS_CHECK_FRAMES = 16           # how often the clock is read
PROGRESS_INTERVAL_NS = 50_000_000     # a yield at least this often: beats, not_ready, stop


class Replay:
    def __init__(self, core: ShardCore):
        self.core = core
        self.applied = 0
        self.ignored: collections.Counter[str] = collections.Counter()
        self.now = core.clock()

    def run(self) -> Iterator[float]:
        """Replay, yielding progress in [0, 1) now and then; ends with the shard writable."""
        core = self.core
        plan = []
        for key, directory in replay_groups(core.fs, core.options.data_dir, core.options.shard):
            own = directory == core.wal_dir
            files = list_wal_files(core.fs, directory)
            plan += [(own, idx, path, i == len(files) - 1) for i, (idx, path) in enumerate(files)]
        sizes = [core.fs.file_size(path) for _, _, path, _ in plan]
        total, done = max(1, sum(sizes)), 0
        resume, frames, next_yield = (0, 0), 0, time.monotonic_ns() + PROGRESS_INTERVAL_NS
        for (own, idx, path, last), size in zip(plan, sizes):
            scan = FileScan(core.fs, path)
            file_no = core.files.add_path(path, scan.view)
            if own:
                core._own_files[idx] = file_no
            for frame in scan.frames():
                if core.owns(frame.topic_id):
                    self.apply(frame, file_no)
                    failpoint.hit("recovery::mid_replay")
                frames += 1
                if frames % PROGRESS_CHECK_FRAMES == 0 and time.monotonic_ns() >= next_yield:
                    next_yield = time.monotonic_ns() + PROGRESS_INTERVAL_NS
                    yield min(0.99, (done + frame.offset) / total)
            done += size
            if own and last:
                self._truncate(scan, file_no)
                resume = (idx, scan.valid_len)
        log.info("event=replayed shard=%d frames=%d ignored=%s topics=%d", core.options.shard,
                 self.applied, dict(self.ignored), len(core.topics))
        core.writer.open(*resume)
        core.seal_reservations(pad=True)

    def _truncate(self, scan: FileScan, file_no: int) -> None:
        if scan.valid_len == scan.size:
            return
        failpoint.hit("recovery::before_truncate")
        if scan.end_reason.startswith("torn"):
            log.warning("event=torn_tail path=%s offset=%d reason=%r", scan.path,
                        scan.valid_len, scan.end_reason)
        handle = self.core.fs.open(scan.path)
        try:
            handle.set_len(scan.valid_len)
            handle.sync_all()
        finally:
            handle.close()
        self.core.files.remap(file_no)

    # --- frames ---------------------------------------------------------------------------

    def apply(self, frame: Frame, file_no: int) -> None:
        handler = _HANDLERS.get(frame.type)
        if handler is None:
            self.ignored[FrameType(frame.type).name.lower()] += 1
            return
        handler(self, frame, file_no)
        self.applied += 1

    def _topic(self, frame: Frame, what: str) -> TopicState | None:
        topic = self.core.by_tid.get(frame.topic_id)
        if topic is None:
            self.ignored[f"{what}_without_topic"] += 1
        return topic

    def _append(self, frame: Frame, file_no: int) -> None:
        topic = self._topic(frame, "append")
        if topic is None or not topic.config.logged or frame.seq <= topic.head:
            return
        if frame.seq != topic.head + 1:
            self.ignored["append_out_of_order"] += 1
            return
        topic.publish_one(frame.seq, make_loc(file_no, frame.offset),
                          envelope_payload_bytes(len(frame.data), frame.flags), frame.ts)

    def _topic_create(self, frame: Frame, file_no: int) -> None:
        body = frame_body.decode_body(frame.type, frame.data)
        if topic_id(body.name) != frame.topic_id:
            self.ignored["topic_id_mismatch"] += 1
            return
        config = TopicConfig.from_bytes(body.config)
        topic = self.core.by_tid.get(frame.topic_id)
        if topic is None:
            self.core.register(TopicState(body.name, config, frame.topic_id))
        else:
            topic.config = config

    def _topic_delete(self, frame: Frame, file_no: int) -> None:
        topic = self._topic(frame, "delete")
        if topic is not None:
            self.core.unregister(topic)

    def _head_watermark(self, frame: Frame, file_no: int) -> None:
        topic = self._topic(frame, "watermark")
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

    def _idem_key(self, frame: Frame, file_no: int) -> None:
        topic = self._topic(frame, "idem_key")
        if topic is None or topic.head < frame.seq:
            return
        if self.now - frame.ts > topic.config.idempotency_window_ms:
            return
        body = frame_body.decode_body(frame.type, frame.data)
        entry = DedupeEntry(frame.seq - body.count + 1, frame.seq, frame.seq, frame.ts)
        topic.dedupe.add(body.key, entry, topic.config.idempotency_window_ms)


_HANDLERS = {
    FrameType.APPEND: Replay._append,
    FrameType.TOPIC_CREATE: Replay._topic_create,
    FrameType.CONFIG_UPDATE: Replay._topic_create,
    FrameType.TOPIC_DELETE: Replay._topic_delete,
    FrameType.HEAD_WATERMARK: Replay._head_watermark,
    FrameType.IDEM_KEY: Replay._idem_key,
    FrameType.CHECKPOINT_MARK: lambda self, frame, file_no: None,
}
