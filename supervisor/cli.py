"""The `topics` command: `topics serve` runs a node with its embedded defaults; `topics fsck`
verifies a data dir read-only (topics_actors.fsck) and prints what it found."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys

from topics_actors import __version__
from topics_actors.config import NodeConfig


def _serve(args: argparse.Namespace) -> int:
    from .node import Supervisor
    config = NodeConfig.from_env()
    overrides = {name: value for name, value in (
        ("data_dir", args.data_dir), ("host", args.host), ("http_port", args.port),
        ("zmq_port", args.zmq_port), ("wal_shards", args.shards),
        ("port_file", args.port_file)) if value is not None}
    config = dataclasses.replace(config, **overrides)
    return Supervisor(config).run()


def _fsck(args: argparse.Namespace) -> int:
    from topics_actors import fsck
    if not os.path.isdir(args.data_dir):
        print(f"topics fsck: {args.data_dir}: no such directory", file=sys.stderr)
        return 2
    if not fsck.looks_like_data_dir(args.data_dir):
        print(f"topics fsck: {args.data_dir}: not a topics data directory (it has none of "
              f"{', '.join(d + '/' for d in fsck.DATA_DIR_MARKS)})", file=sys.stderr)
        return 2
    show = args.progress if args.progress is not None else (
        sys.stderr.isatty() and not args.dump)   # a bar between dump lines would garble both
    # With --json, stdout carries only the JSON document, so dump lines go to stderr.
    report = fsck.check(args.data_dir, dump=args.dump, cold_dir=args.cold_dir,
                        progress=_progress_bar(sys.stderr) if show else None,
                        out=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(_format_report(report))
    return 1 if report.errors else 0


def _progress_bar(stream):
    def draw(done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        filled = int(fraction * 40)
        stream.write(f"\rfsck [{'#' * filled}{'.' * (40 - filled)}] {fraction:6.1%} "
                     f"{done / 2**20:.1f}/{total / 2**20:.1f} MiB")
        if done >= total:
            stream.write("\n")
        stream.flush()
    return draw


def _format_report(r) -> str:
    """Counts first, then one line per problem: `<path>: offset <n>: seq <s>: <reason>`."""
    types = ", ".join(f"{name} {n}" for name, n in sorted(r.frames_by_type.items()))
    valid = sum(s.valid for s in r.snapshots)
    lines = [
        f"fsck {r.data_dir}",
        f"  wal:       {r.wal_files} files in {r.wal_groups} groups, {r.frames} frames"
        + (f" ({types})" if types else "") + f", {r.wal_bytes} bytes",
        f"  snapshots: {len(r.snapshots)} files ({valid} valid), newest valid: "
        f"{'none' if r.newest_snapshot is None else r.newest_snapshot}",
        f"  segments:  {r.segments} segments in {r.segment_files} files, {r.records} records "
        f"({r.deleted_records} deleted), {r.segment_bytes} bytes, {r.orphan_segments} orphans",
        f"  recovery:  {len(r.quarantine)} topics a restart would quarantine",
        f"  total:     {r.files} files, {r.bytes_read} bytes read",
        f"problems: {r.errors} errors, {r.warnings} warnings",
    ]
    return "\n".join(lines + [f"  {p.severity.upper():7} {p}" for p in r.problems])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="topics", description="topics-actors event engine")
    parser.add_argument("--version", action="version", version=f"topics {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a node (supervisor + shard processes)")
    serve.add_argument("--data-dir", help="data directory (TOPICS_DATA_DIR, ./topics-data)")
    serve.add_argument("--host", help="bind host (TOPICS_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="HTTP port (TOPICS_PORT, 4000; 0 = any)")
    serve.add_argument("--zmq-port", type=int,
                       help="ZeroMQ front port (TOPICS_ZMQ_PORT, the HTTP port + 1)")
    serve.add_argument("--shards", type=int, help="WAL shards (TOPICS_WAL_SHARDS, min(cpus,8))")
    serve.add_argument("--port-file", help="write the chosen ports here as JSON")
    serve.set_defaults(func=_serve)
    check = sub.add_parser("fsck", help="verify a data dir (read-only; safe while serving)")
    check.add_argument("data_dir", metavar="data-dir", help="the data directory to verify")
    check.add_argument("--dump", action="store_true",
                       help="also print one line per WAL frame and segment record")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--cold-dir", default=os.environ.get("TOPICS_COLD_DIR") or None,
                       help="the cold tier (default: $TOPICS_COLD_DIR)")
    bar = check.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="draw a progress bar on stderr even when it is not a terminal")
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never draw the progress bar")
    check.set_defaults(func=_fsck)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s supervisor %(levelname)s %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
