"""The `topics` command: `topics serve` runs a node with its embedded defaults."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys

from topics_actors.config import NodeConfig


def _serve(args: argparse.Namespace) -> int:
    from supervisor.node import Supervisor
    config = NodeConfig.from_env()
    overrides = {name: value for name, value in (
        ("data_dir", args.data_dir), ("host", args.host), ("http_port", args.port),
        ("zmq_port", args.zmq_port), ("wal_shards", args.shards),
        ("port_file", args.port_file)) if value is not None}
    config = dataclasses.replace(config, **overrides)
    return Supervisor(config).run()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="topics", description="topics-actors event engine")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a node (supervisor + shard processes)")
    serve.add_argument("--data-dir", help="data directory (TOPICS_DATA_DIR, ./topics-data)")
    serve.add_argument("--host", help="bind host (TOPICS_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="HTTP port (TOPICS_PORT, 4000; 0 = any)")
    serve.add_argument("--zmq-port", type=int, help="ZeroMQ front port (TOPICS_ZMQ_PORT, 4001)")
    serve.add_argument("--shards", type=int, help="WAL shards (TOPICS_WAL_SHARDS, min(cpus,8))")
    serve.add_argument("--port-file", help="write the chosen ports here as JSON")
    serve.set_defaults(func=_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s supervisor %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
