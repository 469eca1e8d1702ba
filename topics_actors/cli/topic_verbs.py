"""The topic verbs of `topics`: ls, info, rm, append and tail (with -f, a watch stream that
resumes from its own cursor after a reconnect)."""

from __future__ import annotations

import json
import sys
import time

import click

from topics_actors.cli.event_stream import events
from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.http_api import ApiError, HttpApi
from topics_actors.cli.output import (api_of, fail, human_bytes, json_option, print_fields,
                                      print_json, print_table, report_deleted, verb)
from topics_actors.cli.record_input import build_records, chunks, parse_datas

DURABILITIES = ("ephemeral", "memory", "disk", "fsync")
LIST_PAGE = 1000
DIFF_LIMIT = 1000
HEARTBEAT_MS = 5000          # a follow's watch stream: silence this long gets a heartbeat
RECONNECT_S = (0.2, 0.5, 1.0, 2.0, 5.0)


def list_topics(api: HttpApi, prefix: str) -> list[dict]:
    """Every topic under `prefix`, page after page."""
    found, cursor = [], None
    while True:
        page = api.request("GET", api.path("v0", "topics", query={
            "prefix": prefix or None, "page_size": LIST_PAGE, "cursor": cursor}))
        found.extend(page.get("topics", []))
        cursor = page.get("next_cursor")
        if not cursor:
            return found


def durability_of(item: dict) -> str:
    """The class a listing item names; a server that lists only `durable` (the original)
    says no more than whether it is fsync."""
    if item.get("durability"):
        return item["durability"]
    return "fsync" if item.get("durable") else "not fsync"


@click.command("ls")
@click.argument("prefix", default="")
@json_option
@click.pass_context
@verb
def ls(ctx, prefix: str, as_json: bool) -> int:
    """List topics (under PREFIX): head, count, bytes and durability."""
    topics = list_topics(api_of(ctx), prefix)
    if as_json:
        print_json({"topics": topics})
        return ExitCode.OK
    print_table(["topic", "head", "count", "bytes", "durability"],
                [[t.get("topic"), t.get("head_seq"), t.get("count"),
                  human_bytes(t.get("bytes")), durability_of(t)] for t in topics],
                right=("head", "count", "bytes"))
    return ExitCode.OK


@click.command("info")
@click.argument("topic")
@json_option
@click.pass_context
@verb
def info(ctx, topic: str, as_json: bool) -> int:
    """A topic's state and config."""
    api = api_of(ctx)
    state = api.request("GET", api.path("v0", "topics", topic, query={"touch": "false"}))
    if as_json:
        print_json(state)
    else:
        print_fields(state, title=topic)
    return ExitCode.OK


@click.command("rm")
@click.argument("topic")
@click.option("--if-empty", is_flag=True, help="refuse when the topic holds records")
@json_option
@click.pass_context
@verb
def rm(ctx, topic: str, if_empty: bool, as_json: bool) -> int:
    """Delete a topic and its records (routers to or from it too)."""
    api = api_of(ctx)
    reply = api.request("DELETE", api.path("v0", "topics", topic,
                                           query={"if_empty": "true" if if_empty else None}))
    return report_deleted(reply, topic, "topic", as_json)


@click.command("append")
@click.argument("topic")
@click.argument("datas", nargs=-1, metavar="[JSON]...")
@click.option("--tag", help="every record's tag")
@click.option("--node", help="every record's node (the writer's id)")
@click.option("--durability", type=click.Choice(DURABILITIES),
              help="the class of a topic this append creates")
@json_option
@click.pass_context
@verb
def append(ctx, topic, datas, tag, node, durability, as_json) -> int:
    """Append records: each JSON argument, or each line of stdin, is one record's data.
    Prints the seqs given, one a line."""
    parsed = parse_datas(datas, "argument") if datas else parse_datas(sys.stdin, "line")
    if not parsed:
        return fail("no records: give JSON arguments or lines on stdin", ExitCode.USAGE)
    api = api_of(ctx)
    body_extra = {"config": {"durability": durability}} if durability else {}
    seqs: list[int] = []
    for batch in chunks(build_records(parsed, tag, node)):
        reply = api.request("POST", api.path("v0", "topics", topic),
                            {"records": batch, **body_extra})
        seqs.extend(reply.get("seqs") or range(reply["first_seq"], reply["last_seq"] + 1))
    if as_json:
        print_json({"topic": topic, "seqs": seqs, "count": len(seqs)})
    else:
        click.echo("\n".join(map(str, seqs)))
    return ExitCode.OK


@click.command("tail")
@click.argument("topic")
@click.option("--from", "from_seq", type=click.IntRange(min=0), default=None,
              help="print the records after this seq (the API's cursor; default 0)")
@click.option("-n", "--last", type=click.IntRange(min=0), default=None,
              help="start this many records before the head")
@click.option("-f", "--follow", is_flag=True, help="keep printing new records until Ctrl-C")
@click.pass_context
@verb
def tail(ctx, topic, from_seq, last, follow) -> int:
    """Print records as JSON lines: what is there, then (-f) what comes."""
    api = api_of(ctx)
    cursor = from_seq or 0
    if last is not None:
        state = api.request("GET", api.path("v0", "topics", topic, query={"touch": "false"}))
        cursor = max(cursor, state["head_seq"] - last)
    cursor = read_to_head(api, topic, cursor)
    if not follow:
        return ExitCode.OK
    try:
        return follow_topic(api, topic, cursor)
    except KeyboardInterrupt:
        return ExitCode.OK


def print_records(records: list) -> None:
    sys.stdout.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    sys.stdout.flush()


def read_to_head(api: HttpApi, topic: str, cursor: int) -> int:
    """Print every record after `cursor` up to the head; the cursor reached."""
    while True:
        page = api.request("POST", api.path("v0", "topics", topic, "diff"),
                           {"from_seq": cursor, "limit": DIFF_LIMIT})
        note_tombstone(page.get("tombstone"))
        print_records(page.get("records", []))
        cursor = page["next_from_seq"]
        if page.get("caught_up") or not page.get("records"):
            return cursor


def note_tombstone(tombstone) -> None:
    if tombstone:
        click.echo(f"topics: records {tombstone.get('gap_from')}-{tombstone.get('gap_to')} "
                   f"are gone ({tombstone.get('reason')})", err=True)


def follow_topic(api: HttpApi, topic: str, cursor: int) -> int:
    """Watch from `cursor` until Ctrl-C; a lost stream is opened again from the last
    record printed, with a growing pause, so no record is skipped or printed twice."""
    failures = 0
    while True:
        try:
            cursor, ended = stream_once(api, topic, cursor)
            failures = 0
            if ended:
                return fail(f"{topic} was deleted", ExitCode.NOT_FOUND)
            click.echo("topics: the stream ended; reconnecting", err=True)
        except ApiError as error:
            if error.status in (401, 403, 404):
                raise
            click.echo(f"topics: {error}; reconnecting", err=True)
        except OSError as error:   # a read that timed out or a reset connection
            click.echo(f"topics: stream lost ({error}); reconnecting", err=True)
        time.sleep(RECONNECT_S[min(failures, len(RECONNECT_S) - 1)])
        failures += 1


def stream_once(api: HttpApi, topic: str, cursor: int) -> tuple[int, bool]:
    """One watch session and its stream, from `cursor`; (the cursor reached, whether the
    topic was deleted). Returns when the stream ends; raises when it breaks."""
    session = api.request("POST", api.path("v0", "watch"), {
        "topics": {topic: {"from_seq": cursor}}, "heartbeat_ms": HEARTBEAT_MS})
    url = session["stream_url"]
    path = url if url.startswith("/") else "/" + url.split("/", 3)[-1]
    reply = api.stream(path, timeout_s=3 * HEARTBEAT_MS / 1000)
    try:
        for event, _id, data in events(reply):
            if event == "record":
                page = json.loads(data)
                print_records(page.get("records", []))
                cursor = max(cursor, page.get("to_seq", cursor))
            elif event == "tombstone":
                gap = json.loads(data)
                note_tombstone(gap)
                cursor = max(cursor, gap.get("gap_to", cursor))
            elif event == "topic-deleted":
                return cursor, True
    finally:
        reply.close()
    return cursor, False
