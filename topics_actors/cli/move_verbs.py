"""`topics cluster move` and `topics cluster drain` (docs/CLUSTER.md 8): ask the node to
move a topic's copies onto other nodes, or every copy off one node, then follow the moves
in GET /v0/cluster until each is done (or --timeout), one line per change of phase."""

from __future__ import annotations

import time

import click

from topics_actors.cli.exit_code import ExitCode
from topics_actors.cli.http_api import ApiError, HttpApi
from topics_actors.cli.output import api_of, fail, json_option, print_json, verb

POLL_S = 0.5
REPEAT_S = 5.0     # a phase whose figures change (a lag) is printed again at most this often


def phase(view: dict | None, wanted: list[str], lags: dict[str, int | None],
          under_way: bool) -> str:
    """Where one topic's move stands, in words, from its GET /v0/cluster entry; `lags`:
    the new replicas' lag in records, as its leader reports them; `under_way`: whether an
    earlier view showed the move (the node's view lags the stored target a moment)."""
    if view is None:
        return "gone (deleted)"
    replicas, isr = view.get("replicas") or [], view.get("isr") or []
    target = view.get("target")
    if target is None:
        if sorted(replicas) == sorted(wanted):
            return f"done: replicas {','.join(replicas)}, leader {view.get('leader')}"
        if not under_way:
            return "starting"
        return f"replaced by another move: replicas {','.join(replicas)}"
    adding = [n for n in target if n not in replicas]
    if adding:
        return f"adding {','.join(adding)}"
    behind = [n for n in target if n not in isr]
    if behind:
        return "catching up: " + ", ".join(
            f"{n} {'lag ?' if lags.get(n) is None else f'lag {lags[n]}'}" for n in behind)
    if view.get("leader") not in target:
        return f"in sync; moving leadership off {view.get('leader')}"
    return f"in sync; removing {','.join(n for n in replicas if n not in target) or '-'}"


def finished(text: str) -> bool:
    return text.startswith(("done", "replaced", "gone"))


def worth_printing(text: str, before: str, printed_s: float, now_s: float) -> bool:
    """A new phase at once; the same phase with new figures every REPEAT_S."""
    if text == before:
        return False
    same_phase = text.split(":")[0] == before.split(":")[0]
    return not same_phase or now_s - printed_s >= REPEAT_S


def _lags(api: HttpApi, topic: str, view: dict) -> dict[str, int | None]:
    """The lag of the target's replicas not yet in sync (the leader's figures)."""
    behind = [n for n in view.get("target") or [] if n not in (view.get("isr") or [])]
    if not behind:
        return {}
    try:
        got = api.request("GET", api.path("v0", "topics", topic))
    except ApiError:
        return {}
    followers = (got.get("replication") or {}).get("followers") or {}
    return {n: (followers.get(n) or {}).get("lag") for n in behind}


def follow(api: HttpApi, moves: list[dict], timeout_s: float, as_json: bool) -> int:
    """Poll the cluster view until every move is done; print each change of phase."""
    wanted = {m["topic"]: m["target"] or m["replicas"] for m in moves}
    said: dict[str, str] = {}
    printed: dict[str, tuple[str, float]] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        topics = api.request("GET", api.path("v0", "cluster")).get("topics") or {}
        for topic in sorted(wanted):
            if finished(said.get(topic, "")):
                continue
            view = topics.get(topic)
            text = phase(view, wanted[topic], _lags(api, topic, view) if view else {},
                         said.get(topic, "starting") != "starting")
            said[topic] = text
            before, printed_s = printed.get(topic, ("", 0.0))
            if worth_printing(text, before, printed_s, time.monotonic()):
                printed[topic] = (text, time.monotonic())
                if not as_json:
                    click.echo(f"{topic}: {text}")
        if all(finished(text) for text in said.values()):
            break
        if time.monotonic() >= deadline:
            if as_json:
                print_json({"done": False, "moves": said})
            return fail(f"{sum(not finished(t) for t in said.values())} moves not done "
                        f"after {timeout_s:g} s; they go on (`topics cluster`)",
                        ExitCode.TIMED_OUT)
        time.sleep(POLL_S)
    if as_json:
        print_json({"done": True, "moves": said})
    return ExitCode.OK


def _started(api: HttpApi, reply: dict, wait: bool, timeout_s: float, as_json: bool) -> int:
    moves = reply.get("moves") or []
    if not wait:
        if as_json:
            print_json(reply)
        for move in moves if not as_json else ():
            click.echo(f"{move['topic']}: {','.join(move['replicas'])} -> "
                       f"{','.join(move['target'] or move['replicas'])}")
        return ExitCode.OK
    if not moves and not as_json:
        click.echo("nothing to move")
    return follow(api, moves, timeout_s, as_json)


wait_option = click.option("--wait/--no-wait", default=True,
                           help="follow the moves until done (default) or return at once")
timeout_option = click.option("--timeout", "timeout_s", type=click.FloatRange(min=0),
                              default=600.0, show_default=True,
                              help="seconds to follow the moves (exit 7 if not done)")


@click.command("move")
@click.argument("topic")
@click.option("--to", "replicas", required=True,
              help="the nodes to hold the topic's copies, comma-separated, preferred "
                   "leader first (as many as it has copies)")
@wait_option
@timeout_option
@json_option
@click.pass_context
@verb
def move(ctx, topic, replicas, wait, timeout_s, as_json) -> int:
    """Move TOPIC's copies onto the nodes of --to: each new copy catches up and joins the
    in-sync replicas before an old one leaves."""
    api = api_of(ctx)
    nodes = [n.strip() for n in replicas.split(",") if n.strip()]
    reply = api.request("POST", api.path("v0", "cluster", "move"),
                        {"topic": topic, "replicas": nodes})
    return _started(api, reply, wait, timeout_s, as_json)


@click.command("drain")
@click.argument("node")
@wait_option
@timeout_option
@json_option
@click.pass_context
@verb
def drain(ctx, node, wait, timeout_s, as_json) -> int:
    """Move every topic's copy off NODE (before removing it) onto the other live nodes."""
    api = api_of(ctx)
    reply = api.request("POST", api.path("v0", "cluster", "drain"), {"node": node})
    return _started(api, reply, wait, timeout_s, as_json)
