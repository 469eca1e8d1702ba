"""The node verbs of `topics`: `cluster` (nodes, controller, leaders, ISR, lag; its
`move` and `drain`: move_verbs.py),
`checksum` (do a topic's in-sync copies agree?) and `quarantine` (topics recovery set
aside, and their repair)."""

from __future__ import annotations

import click

from topics_actors.cli import move_verbs
from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.output import (api_of, fail, json_option, print_json, print_table,
                                      verb)
from topics_actors.cli.http_api import ApiError


def follower_lags(topic: dict) -> str:
    followers = topic.get("followers") or {}
    return " ".join(f"{node}:{f.get('lag')}" for node, f in sorted(followers.items())) or "-"


@click.group("cluster", invoke_without_command=True)
@json_option
@click.pass_context
@verb
def cluster(ctx, as_json) -> int:
    """The cluster as this node sees it: nodes, controller, topic leaders, ISR and lag;
    `move` and `drain` move copies between nodes."""
    if ctx.invoked_subcommand is not None:
        return ExitCode.OK
    api = api_of(ctx)
    try:
        doc = api.request("GET", api.path("v0", "cluster"))
    except ApiError as error:
        if error.status == 404:
            return fail("this node is not in a cluster (started without TOPICS_ZK)",
                        ExitCode.NOT_FOUND)
        raise
    if as_json:
        print_json(doc)
        return ExitCode.OK
    click.echo(f"node {doc.get('node_id')}, controller {doc.get('controller')}, "
               f"session {doc.get('session')}")
    nodes = doc.get("nodes") or {}
    drained = doc.get("draining") or []
    print_table(["node", "advertise", "http", "zmq", "quarantined", "drained"],
                [[name, n.get("advertise"), n.get("http_port"), n.get("zmq_port"),
                  n.get("quarantined"), "yes" if name in drained else None]
                 for name, n in sorted(nodes.items())],
                title="nodes")
    topics = doc.get("topics") or {}
    print_table(["topic", "leader", "epoch", "isr", "replicas", "moving to", "lag"],
                [[name, t.get("leader"), t.get("leader_epoch"), ",".join(t.get("isr") or []),
                  ",".join(t.get("replicas") or []), ",".join(t.get("target") or []) or None,
                  follower_lags(t)]
                 for name, t in sorted(topics.items())], title="topics")
    return ExitCode.OK


cluster.add_command(move_verbs.move)
cluster.add_command(move_verbs.drain)


@click.command("checksum")
@click.argument("topic")
@click.option("--from", "from_seq", type=click.IntRange(min=0), default=0,
              help="first seq (default: the earliest)")
@click.option("--to", "to_seq", type=click.IntRange(min=0), default=0,
              help="last seq (default: the leader's high watermark)")
@json_option
@click.pass_context
@verb
def checksum(ctx, topic, from_seq, to_seq, as_json) -> int:
    """Compare TOPIC's in-sync copies over a seq range, chunk by chunk (exit 6 if they
    differ)."""
    api = api_of(ctx)
    chunks, cursor = [], from_seq
    while True:
        doc = api.request("GET", api.path("v0", "topics", topic, "checksum", query={
            "from_seq": cursor, "to_seq": to_seq or None}))
        chunks.append(doc)
        to_seq = to_seq or doc["until_seq"]     # the first answer fixes the range's end
        if not as_json:
            _print_chunk(doc)
        if not doc["agree"] or doc.get("next_from_seq") is None:
            break
        cursor = doc["next_from_seq"]
    agree = all(doc["agree"] for doc in chunks)
    if as_json:
        print_json({"topic": topic, "agree": agree, "chunks": chunks})
    else:
        click.echo(f"{topic}: the in-sync copies {'agree' if agree else 'DIFFER'} over "
                   f"seqs {chunks[0]['from_seq']}..{chunks[-1]['to_seq']}")
    return ExitCode.OK if agree else ExitCode.DIFFER


def _print_chunk(doc: dict) -> None:
    copies = doc.get("copies") or {}
    click.echo(f"seqs {doc['from_seq']}..{doc['to_seq']}: "
               + ", ".join(f"{node} {c.get('checksum') or c.get('error')}"
                           f" ({c.get('records', '-')} records)"
                           for node, c in copies.items()))
    if doc.get("not_compared"):
        click.echo(f"  not in sync, not compared: {', '.join(doc['not_compared'])}")


@click.group("quarantine", invoke_without_command=True)
@json_option
@click.pass_context
@verb
def quarantine(ctx, as_json) -> int:
    """Topics that recovery set aside (damaged history), and what a repair would lose."""
    if ctx.invoked_subcommand is not None:
        return ExitCode.OK
    api = api_of(ctx)
    doc = api.request("GET", api.path("v0", "quarantine"))
    if as_json:
        print_json(doc)
        return ExitCode.OK
    rows = [[q.get("topic"), q.get("shard"), q.get("reason"), q.get("first_bad_seq"),
             q.get("repairable"), (q.get("would_lose") or {}).get("records")]
            for q in doc.get("quarantined", [])]
    print_table(["topic", "shard", "reason", "first bad seq", "repairable", "would lose"],
                rows, right=("shard", "first bad seq", "would lose"))
    click.echo(f"policy {doc.get('recovery_policy')}, {len(rows)} quarantined")
    return ExitCode.OK


@quarantine.command("repair")
@click.argument("topic")
@json_option
@click.pass_context
@verb
def repair(ctx, topic, as_json) -> int:
    """Cut TOPIC's history at its first bad record and serve it again."""
    api = api_of(ctx)
    reply = api.request("POST", api.path("v0", "quarantine", topic, "repair"))
    if as_json:
        print_json(reply)
    else:
        click.echo(f"repaired {topic}: {reply.get('lost_records')} records lost from seq "
                   f"{reply.get('first_bad_seq')}")
    return ExitCode.OK
