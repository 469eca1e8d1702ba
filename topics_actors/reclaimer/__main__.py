"""Entry point of the reclaimer process: `python -m topics_actors.reclaimer ...` (spawned by
the supervisor)."""

from __future__ import annotations

import argparse
import logging
import sys

from topics_actors.reclaimer.reclaimer_server import ReclaimerServer
from topics_actors.reclaimer.segment_upkeep import SegmentUpkeep
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers
from topics_actors.supervisor_link import die_with_parent, serve_through_front


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topics-reclaimer")
    parser.add_argument("--front", required=True, help="the node's front endpoint")
    parser.add_argument("--control", default=None)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--reclaim-interval-ms", type=int, default=5_000)
    parser.add_argument("--data-dir", default=None, help="look after its segment files")
    parser.add_argument("--cold-dir", default=None)
    parser.add_argument("--hot-retain-segments", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s reclaimer %(levelname)s %(message)s")
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    upkeep = None
    if args.data_dir:
        upkeep = SegmentUpkeep(RealFs(), Tiers(args.data_dir, args.cold_dir),
                               SegmentLock(args.data_dir), args.hot_retain_segments)
    serve_through_front(args, "reclaimer", lambda client, link: ReclaimerServer(
        client, args.reclaim_interval_ms, link, upkeep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
