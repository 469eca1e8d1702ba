"""What the verbs print: JSON for scripts (`--json`), rich tables for people, errors on
stderr. rich is imported on first use, so `topics serve` never pays for it."""

from __future__ import annotations

import functools
import json
import sys

import click

from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.http_api import ApiError, HttpApi
from topics_actors.cli.record_input import BadRecord

json_option = click.option("--json", "as_json", is_flag=True,
                           help="print JSON for scripts instead of a table")


def print_json(doc) -> None:
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def print_table(columns: list[str], rows: list[list], title: str | None = None,
                right: tuple[str, ...] = ()) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title=title, box=None, header_style="bold", pad_edge=False)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    Console(soft_wrap=True).print(table)


def print_fields(doc: dict, title: str | None = None) -> None:
    """A two-column table of one object's fields; nested objects as compact JSON."""
    rows = [[name, value if not isinstance(value, (dict, list)) else
             json.dumps(value, separators=(",", ":"))] for name, value in doc.items()
            if name != "performance"]
    print_table(["field", "value"], rows, title=title)


def fail(message: str, code: ExitCode) -> int:
    click.echo(f"topics: {message}", err=True)
    return int(code)


def api_of(ctx: click.Context) -> HttpApi:
    """The client of the verb's node; its connection closes when the verb ends."""
    settings = ctx.find_root().obj
    api = HttpApi(settings["url"], settings["key"])
    ctx.call_on_close(api.close)
    return api


def verb(function):
    """A verb's errors as an exit code and one line on stderr, never a traceback."""
    @functools.wraps(function)
    def run(*args, **kwargs) -> int:
        try:
            return int(function(*args, **kwargs) or ExitCode.OK)
        except ApiError as error:
            return fail(str(error), error.exit_code)
        except BadRecord as error:
            return fail(f"{error}; nothing was appended", ExitCode.USAGE)
    return run


def report_deleted(reply: dict, name: str, what: str, as_json: bool) -> int:
    """A DELETE's answer: `deleted NAME`, or exit 4 when there was nothing to delete."""
    if as_json:
        print_json(reply)
    elif reply.get("deleted"):
        click.echo(f"deleted {name}")
    if not reply.get("deleted"):
        return fail(f"{name}: no such {what}", ExitCode.NOT_FOUND)
    return ExitCode.OK


def human_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)
