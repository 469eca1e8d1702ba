"""Entry point of the reclaimer process: `python -m topics_actors.reclaimer --options <JSON>`
(spawned by the supervisor; config.ReclaimerOptions)."""

from __future__ import annotations

import sys

import zmq

from topics_actors.child_process import child_main
from topics_actors.config import ReclaimerOptions
from topics_actors.front_process import serve_through_front
from topics_actors.reclaimer.reclaimer_server import ReclaimerServer
from topics_actors.reclaimer.segment_upkeep import SegmentUpkeep
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers
from topics_actors.supervisor_link import SupervisorLink


def serve(options: ReclaimerOptions, ctx: zmq.Context, link: SupervisorLink | None) -> None:
    upkeep = SegmentUpkeep(RealFs(), Tiers(options.data_dir, options.cold_dir),
                           SegmentLock(options.data_dir), options.hot_retain_segments,
                           options.hot_retain_bytes)
    serve_through_front(options.front, ctx, link, lambda client, link: ReclaimerServer(
        client, options.reclaim_interval_ms, link, upkeep))


def main(argv: list[str] | None = None) -> int:
    return child_main(ReclaimerOptions, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
