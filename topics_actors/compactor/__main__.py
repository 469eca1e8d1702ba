"""Entry point of the compactor process: `python -m topics_actors.compactor ...` (spawned by
the supervisor)."""

from __future__ import annotations

import argparse
import logging
import sys

from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.compactor_server import Cadence, CompactorServer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment_lock import SegmentLock
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.wal_layout import layout_generation
from topics_actors.supervisor_link import die_with_parent, serve_through_front


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="topics-compactor")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--front", required=True, help="the node's front endpoint")
    parser.add_argument("--control", default=None)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--wal-file-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--checkpoint-wal-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--checkpoint-interval-ms", type=int, default=60_000)
    parser.add_argument("--segment-max-events", type=int, default=10_000)
    parser.add_argument("--segment-max-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--segment-max-age-ms", type=int, default=3_600_000)
    parser.add_argument("--cold-dir", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s compactor %(levelname)s %(message)s")
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    fs = RealFs()
    limits = SegmentLimits(args.segment_max_events, args.segment_max_bytes,
                           args.segment_max_age_ms)
    cadence = Cadence(args.checkpoint_wal_bytes, args.checkpoint_interval_ms,
                      wal_file_bytes=args.wal_file_bytes)
    serve_through_front(args, "compactor", lambda client, link: CompactorServer(
        Checkpointer(fs, args.data_dir, limits, tiers=Tiers(args.data_dir, args.cold_dir)),
        client, cadence, link, layout_generation(fs, args.data_dir),
        SegmentLock(args.data_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
