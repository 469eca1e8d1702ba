"""The reclaimer process: retention off the write path.

Cap and TTL retention is applied lazily whenever a topic is written or read; a topic nobody
touches would keep its expired records forever. Every `reclaim_interval_ms` the reclaimer
asks each shard to apply retention to all its topics (`retain`); the shard logs the floors
it raises (EvictWatermark) and the compactor then drops the segments wholly below them.
"""

from __future__ import annotations

import logging
import time

from topics_actors.client.sync_client import Client
from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Retain
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

SLICE_S = 0.1


class ReclaimerServer:
    def __init__(self, client: Client, interval_ms: int, link: SupervisorLink | None):
        self.client = client
        self.interval_ms = interval_ms
        self.link = link
        self.stopping = False
        self.passes = 0

    def serve(self) -> None:
        self._beat("ready", force=True)
        next_pass = time.monotonic() + self.interval_ms / 1000
        while not self.stopping:
            time.sleep(SLICE_S)
            self._beat()
            if time.monotonic() >= next_pass:
                self.reclaim()
                next_pass = time.monotonic() + self.interval_ms / 1000
        self._beat("stopping", force=True)
        log.info("event=stopped passes=%d", self.passes)

    def _beat(self, state: str | None = None, force: bool = False) -> None:
        if self.link and not self.link.keep_alive(state, force):
            self.stopping = True

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
