"""Entry point of the reclaimer process: `python -m topics_actors.reclaimer ...` (spawned by
the supervisor)."""

from __future__ import annotations

import argparse
import logging
import sys

from topics_actors.reclaimer.reclaimer_server import ReclaimerServer
from topics_actors.supervisor_link import die_with_parent, serve_through_front


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topics-reclaimer")
    parser.add_argument("--front", required=True, help="the node's front endpoint")
    parser.add_argument("--control", default=None)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--reclaim-interval-ms", type=int, default=5_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s reclaimer %(levelname)s %(message)s")
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    serve_through_front(args, "reclaimer", lambda client, link: ReclaimerServer(
        client, args.reclaim_interval_ms, link))
    return 0


if __name__ == "__main__":
    sys.exit(main())
