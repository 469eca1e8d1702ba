"""Entry point of the compactor process: `python -m topics_actors.compactor --options <JSON>`
(spawned by the supervisor; config.CompactorOptions)."""

from __future__ import annotations

import sys

import zmq

from topics_actors.child_process import child_main
from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.compactor_server import Cadence, CompactorServer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.config import CompactorOptions
from topics_actors.front_process import serve_through_front
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.wal_layout import layout_generation
from topics_actors.supervisor_link import SupervisorLink


def serve(options: CompactorOptions, ctx: zmq.Context, link: SupervisorLink | None) -> None:
    fs, data_dir = RealFs(), options.data_dir
    limits = SegmentLimits(options.segment_max_events, options.segment_max_bytes,
                           options.segment_max_age_ms)
    cadence = Cadence(options.checkpoint_wal_bytes, options.checkpoint_interval_ms,
                      wal_file_bytes=options.wal_file_bytes)
    serve_through_front(options.front, ctx, link, lambda client, link: CompactorServer(
        Checkpointer(fs, data_dir, limits, tiers=Tiers(data_dir, options.cold_dir)),
        client, cadence, link, layout_generation(fs, data_dir), SegmentLock(data_dir)))


def main(argv: list[str] | None = None) -> int:
    return child_main(CompactorOptions, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
