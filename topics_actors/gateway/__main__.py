"""Entry point of a gateway process: `python -m topics_actors.gateway ...` (spawned by the
supervisor, which passes the listening socket's descriptor)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from topics_actors.gateway.gateway_server import GatewayServer
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.supervisor_link import child_context, die_with_parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topics-gateway")
    parser.add_argument("--listen-fd", type=int, required=True,
                        help="descriptor of the bound, listening HTTP socket")
    parser.add_argument("--front", required=True, help="the node's front endpoint")
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--control", default=None)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--node-started-ms", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s gateway-{args.index:02d} %(levelname)s %(message)s")
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    settings = GatewaySettings.from_env()
    with child_context(args.control, "gateway", args.index, args.parent_pid,
                       args.heartbeat_interval_ms) as (_ctx, link):
        if link:
            link.hello("", "")
        GatewayServer(settings, args.front, args.listen_fd, args.index, link,
                      args.heartbeat_interval_ms,
                      args.node_started_ms or time.time_ns() // 1_000_000).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
