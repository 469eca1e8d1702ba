"""The `topics` command: `topics serve` runs a node with its embedded defaults; `topics fsck`
verifies a data dir read-only (topics_actors.fsck) and prints what it found; the other
verbs (ls, info, rm, append, tail, queue, routers, cluster, quarantine, bench) speak the /v0
HTTP API of a running node (topics_actors.cli). Exit codes: topics_actors/cli/exit_code.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys

import click

from topics_actors import __version__
from topics_actors.cli import VERB_NAMES, add_verbs
from topics_actors.cli.exit_code import ExitCode
from topics_actors.config import NodeConfig

DEFAULT_URL = f"http://{NodeConfig.host}:{NodeConfig.http_port}"


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"topics {__version__}")
        raise SystemExit(0)


class VerbGroup(click.Group):
    """`serve` and `fsck` are defined here; the HTTP verbs (topics_actors.cli) are imported
    when one is asked for, so that a node's supervisor never loads them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *VERB_NAMES})

    def get_command(self, ctx: click.Context, name: str):
        if name in VERB_NAMES and name not in self.commands:
            add_verbs(self)
        return super().get_command(ctx, name)


@click.group(cls=VerbGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="print the version and exit")
@click.option("--url", envvar="TOPICS_URL", default=DEFAULT_URL, show_default=True,
              help="the node's HTTP API ($TOPICS_URL)")
@click.option("--key", envvar="TOPICS_KEY", default=None,
              help="an API key, sent as a bearer token ($TOPICS_KEY)")
@click.pass_context
def topics(ctx: click.Context, url: str, key: str | None) -> None:
    """topics-actors: a persistent event engine, and a client of its /v0 HTTP API."""
    ctx.obj = {"url": url, "key": key}


@topics.command("serve")
@click.option("--data-dir", help="data directory (TOPICS_DATA_DIR, ./topics-data)")
@click.option("--host", help="bind host (TOPICS_HOST, 127.0.0.1)")
@click.option("--port", type=int, help="HTTP port (TOPICS_PORT, 4000; 0 = any)")
@click.option("--zmq-port", type=int,
              help="ZeroMQ front port (TOPICS_ZMQ_PORT, the HTTP port + 1)")
@click.option("--shards", type=int, help="WAL shards (TOPICS_WAL_SHARDS, min(cpus,8))")
@click.option("--port-file", help="write the chosen ports here as JSON")
def serve(data_dir, host, port, zmq_port, shards, port_file) -> int:
    """Run a node (supervisor + shard processes)."""
    from .node import Supervisor
    config = NodeConfig.from_env()
    overrides = {name: value for name, value in (
        ("data_dir", data_dir), ("host", host), ("http_port", port),
        ("zmq_port", zmq_port), ("wal_shards", shards),
        ("port_file", port_file)) if value is not None}
    config = dataclasses.replace(config, **overrides)
    return Supervisor(config).run()


@topics.command("fsck")
@click.argument("data_dir", metavar="DATA-DIR")
@click.option("--dump", is_flag=True,
              help="also print one line per WAL frame and segment record")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--cold-dir", default=lambda: os.environ.get("TOPICS_COLD_DIR") or None,
              help="the cold tier (default: $TOPICS_COLD_DIR)")
@click.option("--progress/--no-progress", default=None,
              help="draw a progress bar on stderr (default: when it is a terminal)")
def fsck_command(data_dir, dump, as_json, cold_dir, progress) -> int:
    """Verify a data dir (read-only; safe while serving)."""
    from topics_actors import fsck
    if not os.path.isdir(data_dir):
        print(f"topics fsck: {data_dir}: no such directory", file=sys.stderr)
        return ExitCode.USAGE
    if not fsck.looks_like_data_dir(data_dir):
        print(f"topics fsck: {data_dir}: not a topics data directory (it has none of "
              f"{', '.join(d + '/' for d in fsck.DATA_DIR_MARKS)})", file=sys.stderr)
        return ExitCode.USAGE
    show = progress if progress is not None else (
        sys.stderr.isatty() and not dump)   # a bar between dump lines would garble both
    # With --json, stdout carries only the JSON document, so dump lines go to stderr.
    report = fsck.check(data_dir, dump=dump, cold_dir=cold_dir,
                        progress=_progress_bar(sys.stderr) if show else None,
                        out=sys.stderr if as_json else sys.stdout)
    if as_json:
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


def main(argv: list[str] | None = None) -> int:
    """Run one verb; its exit code. Usage errors and --version raise SystemExit."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s supervisor %(levelname)s %(message)s")
    try:
        code = topics.main(args=argv, prog_name="topics", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        raise SystemExit(error.exit_code) from None
    except click.Abort:
        return ExitCode.INTERRUPTED
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
