"""The reclaimer process: retention off the write path.

Cap and TTL retention is applied lazily whenever a topic is written or read; a topic nobody
touches would keep its expired records forever. Every `reclaim_interval_ms` the reclaimer
asks each shard to apply retention to all its topics (`retain`); the shard logs the floors
it raises (EvictWatermark) and the compactor's next snapshot stops listing the segments
wholly below them. Then it looks after the segment files (segment_upkeep): the sweep of
files no kept snapshot lists, and relocation to the cold tier.
"""

from __future__ import annotations

import logging
import time

from topics_actors.allocator_policy import release_free_memory
from topics_actors.client.sync_client import Client
from topics_actors.config import ProcessState
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Retain
from topics_actors.reclaimer.segment_upkeep import SegmentUpkeep
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

SLICE_S = 0.1


class ReclaimerServer:
    def __init__(self, client: Client, interval_ms: int, link: SupervisorLink | None,
                 upkeep: SegmentUpkeep | None = None):
        self.client = client
        self.upkeep = upkeep
        self.interval_ms = interval_ms
        self.link = link
        self.stopping = False
        self.passes = 0

    def serve(self) -> None:
        self._beat(ProcessState.READY, force=True)
        next_pass = time.monotonic() + self.interval_ms / 1000
        while not self.stopping:
            time.sleep(SLICE_S)
            self._beat()
            if time.monotonic() >= next_pass:
                self.reclaim()
                self.keep_segments()
                next_pass = time.monotonic() + self.interval_ms / 1000
        self._beat(ProcessState.STOPPING, force=True)
        if self.upkeep is not None:   # the compactor stopped first: its final snapshot is in
            self._sweep_once()
        log.info("event=stopped passes=%d", self.passes)

    def _beat(self, state: ProcessState | None = None, force: bool = False) -> None:
        if self.link and not self.link.keep_alive(state, force):
            self.stopping = True

    def keep_segments(self) -> dict:
        """Sweep and relocate segment files; a failure is logged and retried next pass."""
        if self.upkeep is None:
            return {}
        try:
            done = self.upkeep.run(self._beat)
        except (TopicsError, OSError) as error:
            log.error("event=segment_upkeep_failed error=%r", error)
            return {}
        finally:
            release_free_memory()   # the snapshot bodies a pass decodes
        if done["removed"] or done["relocated"]:
            log.info("event=segments_kept removed_files=%d relocated=%d", done["removed"],
                     done["relocated"])
        return done

    def _sweep_once(self) -> None:
        try:
            self.upkeep.sweep()
        except (TopicsError, OSError) as error:
            log.error("event=final_sweep_failed error=%r", error)

    def reclaim(self) -> int:
        """One pass over every shard; returns how many topics had floors raised."""
        raised = 0
        try:
            count = self.client.status()["shard_count"]
        except TopicsError as error:
            log.info("event=reclaim_skipped reason=%r", error.message)
            return 0
        for shard in range(count):
            try:
                raised += self.client.call_shard(shard, Retain())["topics"]
            except TopicsError as error:   # a replaying or restarting shard: next pass
                log.info("event=retain_skipped shard=%d reason=%r", shard, error.message)
            self._beat()
        self.passes += 1
        if raised:
            log.info("event=reclaimed topics=%d", raised)
        return raised
