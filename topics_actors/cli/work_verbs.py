"""The queue and router verbs of `topics`: `queue claim|ack|nack|extend` and
`routers ls|put|rm`."""

from __future__ import annotations

import json

import click

from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.http_api import HttpApi
from topics_actors.cli.output import (api_of, fail, json_option, print_json, print_table,
                                      report_deleted, verb)

GUARANTEES = ("at_least_once", "exactly_once")
LIST_PAGE = 1000


def settled(reply: dict, field: str) -> int:
    """How many seqs an ack, nack or extend settled: a count (this server and the original),
    or a list of seqs (this server before issue 30)."""
    value = reply.get(field, 0)
    return len(value) if isinstance(value, list) else int(value)


@click.group("queue")
def queue() -> None:
    """Take and settle jobs of a queue topic."""


node_option = click.option("--node", required=True, help="the worker's id (holds the leases)")
lease_ids_option = click.option("--lease-id", "lease_ids", multiple=True,
                                help="fence: one per SEQ, in order ('' for none)")


@queue.command("claim")
@click.argument("topic")
@node_option
@click.option("--max", "max_jobs", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--lease-ms", type=click.IntRange(min=1), help="default: the topic's lease_ms")
@json_option
@click.pass_context
@verb
def claim(ctx, topic, node, max_jobs, lease_ms, as_json) -> int:
    """Lease up to --max ready jobs to --node."""
    api = api_of(ctx)
    body = {"node": node, "max": max_jobs}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    reply = api.request("POST", api.path("v0", "topics", topic, "claim"), body)
    if as_json:
        print_json(reply)
        return ExitCode.OK
    print_table(["seq", "lease_id", "deadline", "deliveries", "data"],
                [[j.get("$seq"), j.get("lease_id"), j.get("deadline"), j.get("deliveries"),
                  json.dumps(j.get("data"), separators=(",", ":"))]
                 for j in reply.get("claimed", [])], right=("seq", "deliveries"))
    click.echo(f"claimed {len(reply.get('claimed', []))}, ready {reply.get('ready')}")
    return ExitCode.OK


def settle(ctx, topic: str, verb_name: str, field: str, body: dict, as_json: bool) -> int:
    api: HttpApi = api_of(ctx)
    if body.get("lease_ids") is not None and len(body["lease_ids"]) != len(body["seqs"]):
        return fail("give one --lease-id per SEQ, or none", ExitCode.USAGE)
    reply = api.request("POST", api.path("v0", "topics", topic, verb_name), body)
    count = settled(reply, field)
    if as_json:
        print_json({**reply, field: count})
    else:
        skipped = reply.get("skipped") or []
        click.echo(f"{field}: {count}" + (f", skipped: {' '.join(map(str, skipped))}"
                                          if skipped else ""))
    return ExitCode.OK


def settle_body(node: str, seqs: tuple, lease_ids: tuple) -> dict:
    body = {"node": node, "seqs": list(seqs)}
    if lease_ids:
        body["lease_ids"] = list(lease_ids)
    return body


seqs_argument = click.argument("seqs", nargs=-1, type=click.IntRange(min=1), required=True)


@queue.command("ack")
@click.argument("topic")
@seqs_argument
@node_option
@lease_ids_option
@json_option
@click.pass_context
@verb
def ack(ctx, topic, seqs, node, lease_ids, as_json) -> int:
    """Finish the jobs SEQS that --node holds."""
    return settle(ctx, topic, "ack", "acked", settle_body(node, seqs, lease_ids), as_json)


@queue.command("nack")
@click.argument("topic")
@seqs_argument
@node_option
@lease_ids_option
@click.option("--delay-ms", type=click.IntRange(min=0), default=0, show_default=True,
              help="claimable again after this long")
@json_option
@click.pass_context
@verb
def nack(ctx, topic, seqs, node, lease_ids, delay_ms, as_json) -> int:
    """Give the jobs SEQS back to the queue."""
    body = {**settle_body(node, seqs, lease_ids), "delay_ms": delay_ms}
    return settle(ctx, topic, "nack", "nacked", body, as_json)


@queue.command("extend")
@click.argument("topic")
@seqs_argument
@node_option
@lease_ids_option
@click.option("--lease-ms", type=click.IntRange(min=1), required=True,
              help="new deadline: now + this")
@json_option
@click.pass_context
@verb
def extend(ctx, topic, seqs, node, lease_ids, lease_ms, as_json) -> int:
    """Move the deadline of the leases on SEQS."""
    body = {**settle_body(node, seqs, lease_ids), "lease_ms": lease_ms}
    return settle(ctx, topic, "extend", "extended", body, as_json)


@click.group("routers")
def routers() -> None:
    """List, create and delete routers (copies of a topic's new records into another)."""


def list_routers(api: HttpApi, prefix: str, source: str | None, dest: str | None) -> list:
    found, cursor = [], None
    while True:
        page = api.request("GET", api.path("v0", "routers", query={
            "prefix": prefix or None, "source": source, "dest": dest, "page_size": LIST_PAGE,
            "cursor": cursor}))
        found.extend(page.get("routers", []))
        cursor = page.get("next_cursor")
        if not cursor:
            return found


@routers.command("ls")
@click.argument("prefix", default="")
@click.option("--source", help="only routers from this topic")
@click.option("--dest", help="only routers into this topic")
@json_option
@click.pass_context
@verb
def routers_ls(ctx, prefix, source, dest, as_json) -> int:
    """List routers (under PREFIX)."""
    found = list_routers(api_of(ctx), prefix, source, dest)
    if as_json:
        print_json({"routers": found})
    else:
        print_table(["router", "source", "dest", "guarantee", "forwarded"],
                    [[r.get("router"), r.get("source"), r.get("dest"), r.get("guarantee"),
                      r.get("forwarded_total")] for r in found], right=("forwarded",))
    return ExitCode.OK


@routers.command("put")
@click.argument("name")
@click.option("--source", required=True)
@click.option("--dest", required=True)
@click.option("--filter", "tag_filter", help="copy only records whose tag matches: a tag, "
              "or a prefix ending in *")
@click.option("--preserve-node/--no-preserve-node", default=None)
@click.option("--preserve-tag/--no-preserve-tag", default=None)
@click.option("--guarantee", type=click.Choice(GUARANTEES))
@json_option
@click.pass_context
@verb
def routers_put(ctx, name, source, dest, tag_filter, preserve_node, preserve_tag, guarantee,
                as_json) -> int:
    """Create the router NAME, or change its options."""
    api = api_of(ctx)
    body = {"source": source, "dest": dest}
    for field, value in (("filter", tag_filter), ("preserve_node", preserve_node),
                         ("preserve_tag", preserve_tag), ("guarantee", guarantee)):
        if value is not None:
            body[field] = value
    reply = api.request("PUT", api.path("v0", "routers", name), body)
    if as_json:
        print_json(reply)
    else:
        click.echo(f"{'created' if reply.get('created') else 'updated'} {name}: "
                   f"{reply.get('source')} -> {reply.get('dest')}")
    return ExitCode.OK


@routers.command("rm")
@click.argument("name")
@json_option
@click.pass_context
@verb
def routers_rm(ctx, name, as_json) -> int:
    """Delete the router NAME (the copies stay in its dest)."""
    api = api_of(ctx)
    reply = api.request("DELETE", api.path("v0", "routers", name))
    return report_deleted(reply, name, "router", as_json)
