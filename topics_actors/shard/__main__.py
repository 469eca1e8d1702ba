"""Entry point of a shard process: `python -m topics_actors.shard ...` (spawned by the
supervisor)."""

from __future__ import annotations

import argparse
import logging
import sys

from topics_actors.config import ShardOptions
from topics_actors.shard.shard_core import ShardCore
from topics_actors.shard.shard_server import ShardServer
from topics_actors.storage.fs import RealFs
from topics_actors.supervisor_link import child_context, die_with_parent, stop_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="topics-shard")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--shard", type=int, required=True)
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ipc", default=None)
    parser.add_argument("--control", default=None)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--wal-file-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--disk-flush-interval-ms", type=int, default=10)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--quota-file", default=None)
    parser.add_argument("--cold-dir", default=None)
    parser.add_argument("--max-total-bytes", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s shard-{args.shard:02d} %(levelname)s %(message)s")
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    options = ShardOptions(args.data_dir, args.shard, args.shards, args.wal_file_bytes,
                           args.disk_flush_interval_ms, quota_file=args.quota_file,
                           max_total_bytes=args.max_total_bytes, cold_dir=args.cold_dir)
    with child_context(args.control, "shard", args.shard, args.parent_pid,
                       args.heartbeat_interval_ms) as (ctx, link):
        server = ShardServer(ShardCore(RealFs(), options), ctx, link, args.host, args.port,
                             args.ipc)
        stop_on_signals(server)
        server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
