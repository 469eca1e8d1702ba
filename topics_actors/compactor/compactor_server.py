"""The compactor process's shell: when to checkpoint, and the talk with the shards.

Every `check_interval_ms` it asks each shard for its WAL position; a checkpoint is due when
any shard has written `checkpoint_wal_bytes` since its last barrier, or when
`checkpoint_interval_ms` has passed and anything at all was written. A checkpoint: a barrier
from every shard (any failure aborts it), the Checkpointer's work, then `absorbed` to every
shard; retired WAL groups go once every shard has taken the snapshot in. On SIGTERM it
writes a final checkpoint (the supervisor stops the compactor before the shards), so a clean
restart replays only what was written after it.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from topics_actors.allocator_policy import release_free_memory
from topics_actors.client.sync_client import Client
from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.config import (
    CHECKPOINT_INTERVAL_MS_DEFAULT, CHECKPOINT_WAL_BYTES_DEFAULT, WAL_FILE_BYTES_DEFAULT,
    ProcessState,
)
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Absorbed, Checkpoint, Status
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.wal_layout import shard_key
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

SLICE_S = 0.1


@dataclasses.dataclass(frozen=True)
class Cadence:
    checkpoint_wal_bytes: int = CHECKPOINT_WAL_BYTES_DEFAULT
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT
    check_interval_ms: int = 1_000
    wal_file_bytes: int = WAL_FILE_BYTES_DEFAULT

    def wal_bytes(self, position: tuple[int, int], since: tuple[int, int]) -> int:
        """Bytes written between two WAL positions of one group (files are this long)."""
        return (position[0] - since[0]) * self.wal_file_bytes + position[1] - since[1]

    def due(self, positions: dict[str, tuple[int, int]], since: dict[str, tuple[int, int]],
            idle_ms: float) -> bool:
        grown = [self.wal_bytes(p, tuple(since.get(k, (1, 0)))) for k, p in positions.items()]
        if any(g >= self.checkpoint_wal_bytes for g in grown):
            return True
        return idle_ms >= self.checkpoint_interval_ms and any(g > 0 for g in grown)


LOCK_WAIT_S = 60.0    # the reclaimer holds the segment lock for unlinks and small copies


class CompactorServer:
    def __init__(self, checkpointer: Checkpointer, client: Client, cadence: Cadence,
                 link: SupervisorLink | None, generation: int, lock: SegmentLock | None = None):
        self.checkpointer = checkpointer
        self.lock = lock
        self.client = client
        self.cadence = cadence
        self.link = link
        self.generation = generation
        self.stopping = False
        self.last_ns = time.monotonic_ns()
        self.checkpoints = 0

    def serve(self) -> None:
        self._beat(ProcessState.READY, force=True)
        log.info("event=ready snapshot=%d", self.checkpointer.snapshot_id)
        next_check = time.monotonic()
        while not self.stopping:
            time.sleep(SLICE_S)
            self._beat()
            self.checkpointer.sweep_idle_maps(time.monotonic_ns())
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.cadence.check_interval_ms / 1000
                if self._due():
                    self._try_checkpoint()
        self._beat(ProcessState.STOPPING, force=True)
        if self.link is None or self.link.parent_alive():
            self._try_checkpoint()        # without a supervisor the shards are going too
        self.checkpointer.close()
        log.info("event=stopped checkpoints=%d", self.checkpoints)

    def _beat(self, state: ProcessState | None = None, force: bool = False) -> None:
        if self.link and not self.link.keep_alive(state, force):
            self.stopping = True

    def _key(self, shard: int) -> str:
        return shard_key(self.generation, shard)

    def _due(self) -> bool:
        try:
            count = self.client.status()["shard_count"]
            positions = {self._key(s): tuple(self.client.call_shard(s, Status())["wal_position"])
                         for s in range(count)}
        except TopicsError as error:
            log.info("event=checkpoint_check_skipped reason=%r", error.message)
            return False
        idle_ms = (time.monotonic_ns() - self.last_ns) / 1e6
        return self.cadence.due(positions, self.checkpointer.positions, idle_ms)

    def _try_checkpoint(self) -> None:
        try:
            self.checkpoint()
        except (TopicsError, OSError) as error:
            log.error("event=checkpoint_failed error=%r", error)
        self.last_ns = time.monotonic_ns()

    def checkpoint(self) -> int:
        t0 = time.monotonic()
        count = self.client.status()["shard_count"]
        barriers, accounting = {}, []
        for shard in range(count):
            reply = self.client.call_shard(shard, Checkpoint())
            barriers[reply["group"]] = (reply["idx"], reply["offset"])
            accounting += reply["accounting"]
            self._beat()
        if self.lock is not None:   # the reclaimer's sweep and relocations wait meanwhile
            self.lock.acquire(LOCK_WAIT_S, self._beat)
        try:
            snap_id = self.checkpointer.checkpoint(barriers, self._beat, accounting)
        finally:
            if self.lock is not None:
                self.lock.release()
        taken = 0
        for shard in range(count):
            try:
                self.client.call_shard(shard, Absorbed(snap_id))
                taken += 1
            except TopicsError as error:   # it takes in a later snapshot, or recovers from it
                log.warning("event=absorbed_not_taken shard=%d error=%r", shard, error.message)
            self._beat()
        retired = self.checkpointer.remove_retired() if taken == count else 0
        release_free_memory()   # what absorbing, flushing and the snapshot's body freed
        self.checkpoints += 1
        log.info("event=checkpoint snapshot=%d shards=%d taken=%d retired_groups_removed=%d "
                 "seconds=%.3f", snap_id, count, taken, retired, time.monotonic() - t0)
        return snap_id
