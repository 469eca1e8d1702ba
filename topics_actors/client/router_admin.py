"""Router management (spec/api.md 6) as steps, shared by the blocking client, the asyncio
client and the gateway (which goes through the asyncio client).

A router is kept by its destination's shard; rules that span the node (a cycle through
routers of other shards, the router cap, a name used for another destination) need every
shard's routers, so each operation is a generator of requests: it yields ToTopic (one
request to the shard owning a topic) or ToAll (the same request to every shard, answered
with the list of replies), gets the reply sent back (or the error thrown in), and returns
the result. The caller's driver only moves messages; the rules are here, in one place.

Two PUTs racing through different gateways can both pass the node-wide checks; the
destination's shard re-checks what it can see alone (one source per destination, no
repointing), so the race can at worst close a cycle that only `allow_cycle` would have
allowed: the hop cap (8) still ends any loop.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from topics_actors.client.request_shapes import decode_cursor, encode_cursor
from topics_actors.errors import (
    ErrorCode, TopicsError, invalid, router_cycle, router_fan_in, router_not_found,
    router_repoint,
)
from topics_actors.ledger.router_state import parse_definition
from topics_actors.limits import LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, clamp
from topics_actors.protocol.messages import (
    DeleteRouters, DeleteTopic, GetTopic, ListRouters, PutRouter, PutTopic,
)
from topics_actors.topic_identity import valid_router_name, valid_topic_name


class ToTopic(NamedTuple):
    topic: str
    msg: Any


class ToAll(NamedTuple):
    msg: Any


class Done(NamedTuple):
    value: dict


Steps = Generator[Any, Any, dict]


def advance(steps: Steps, reply: object, error: TopicsError | None) -> ToTopic | ToAll | Done:
    """The operation's next request, given the last one's reply or error (which the
    operation may catch); Done with its result at the end. The clients' drive loops send
    what this returns and bring back what comes."""
    try:
        return steps.throw(error) if error is not None else steps.send(reply)
    except StopIteration as done:
        return Done(done.value)
LIST_ITEM = ("router", "source", "dest", "guarantee", "forwarded_total")


def check_names(name: str, source: str, dest: str) -> None:
    if not valid_router_name(name):
        raise invalid(f"invalid router name {name!r}", {"router": name})
    for topic in (source, dest):
        if not valid_topic_name(topic):
            raise invalid(f"invalid topic name {topic!r}", {"topic": topic})
    if source == dest:
        raise invalid("a router's source and dest must differ")


def check_graph(routers: list[dict], name: str, source: str, dest: str, allow_cycle: bool,
                routers_max: int) -> None:
    """The node-wide rules of a PUT, in the contract's order."""
    existing = next((r for r in routers if r["router"] == name), None)
    if any(r["dest"] == dest and r["source"] != source and r["router"] != name
           for r in routers):
        raise router_fan_in(dest)
    if existing is not None and (existing["source"], existing["dest"]) != (source, dest):
        raise router_repoint(name, existing["source"], existing["dest"])
    if existing is None and routers_max and len(routers) >= routers_max:
        raise TopicsError(f"the node's max_routers cap ({routers_max}) is reached",
                          ErrorCode.THROTTLED, {"limit": "max_routers", "max": routers_max})
    if not allow_cycle and existing is None:
        path = route_path(routers, dest, source)
        if path is not None:
            raise router_cycle([source, *path])


def route_path(routers: list[dict], start: str, goal: str) -> list[str] | None:
    """Topics from `start` to `goal` along routers (breadth first, so the shortest)."""
    edges: dict[str, list[str]] = {}
    for r in routers:
        edges.setdefault(r["source"], []).append(r["dest"])
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for topic in frontier:
            if topic == goal:
                path = [topic]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return path[::-1]
            for nxt in sorted(edges.get(topic, ())):
                if nxt not in came_from:
                    came_from[nxt] = topic
                    following.append(nxt)
        frontier = following
    return None


def _merged(replies: list[dict]) -> list[dict]:
    return sorted((r for reply in replies for r in reply["routers"]),
                  key=lambda r: r["router"])


def _topics_cap(topics_max: int) -> TopicsError:
    return TopicsError(f"the node's max_topics cap ({topics_max}) is reached",
                       ErrorCode.THROTTLED, {"limit": "max_topics", "max": topics_max})


def put_router(name: str, body: dict, routers_max: int = 0, topics_max: int = 0) -> Steps:
    """`topics_max`: the node's topic cap when it is reached (0: not reached); a router
    that would create its source or dest is then refused (429 max_topics)."""
    definition = parse_definition(name, body)
    source, dest = definition.source, definition.dest
    check_names(name, source, dest)
    if not definition.create_dest:
        yield ToTopic(dest, GetTopic(dest, False))        # 404 topic_not_found
    routers = _merged((yield ToAll(ListRouters())))
    check_graph(routers, name, source, dest, definition.allow_cycle, routers_max)
    if topics_max and definition.create_dest:
        try:
            yield ToTopic(dest, GetTopic(dest, False))
        except TopicsError as error:
            if error.code != ErrorCode.TOPIC_NOT_FOUND:
                raise
            raise _topics_cap(topics_max) from None
    try:
        head = (yield ToTopic(source, GetTopic(source, False)))["head_seq"]
    except TopicsError as error:
        if error.code != ErrorCode.TOPIC_NOT_FOUND:
            raise
        if topics_max:
            raise _topics_cap(topics_max) from None
        created = (yield ToTopic(source, PutTopic(source, {}))).get("created", False)
        head = 0
    else:
        created = False
    try:
        return (yield ToTopic(dest, PutRouter(
            dest, name, source, head, definition.preserve_node, definition.preserve_tag,
            definition.create_dest, body.get("filter"), definition.allow_cycle,
            definition.guarantee)))
    except TopicsError:
        if created:              # a refused router leaves nothing behind: not its source
            try:
                yield ToTopic(source, DeleteTopic(source, True))
            except TopicsError:
                pass             # written to meanwhile: it stays, as any topic would
        raise


def every_router() -> Steps:
    """Every router of the node, name order (the gateway's read-your-writes cache)."""
    return _merged((yield ToAll(ListRouters())))


def get_router(name: str) -> Steps:
    for router in _merged((yield ToAll(ListRouters()))):
        if router["router"] == name:
            return router
    raise router_not_found(name)


def list_routers(prefix: str = "", source: str | None = None, dest: str | None = None,
                 page_size: int | None = None, cursor: str | None = None,
                 visible: Callable[[dict], bool] = lambda r: True) -> Steps:
    after = decode_cursor(cursor)
    size = clamp(page_size or LIST_PAGE_SIZE_DEFAULT, 1, LIST_PAGE_SIZE_MAX)
    chosen = [r for r in _merged((yield ToAll(ListRouters())))
              if r["router"].startswith(prefix) and r["router"] > after
              and source in (None, r["source"]) and dest in (None, r["dest"]) and visible(r)]
    page = [{field: r[field] for field in LIST_ITEM} for r in chosen[:size]]
    result: dict[str, Any] = {"routers": page}
    if len(chosen) > size:
        result["next_cursor"] = encode_cursor(page[-1]["router"])
    return result


def delete_router(name: str) -> Steps:
    replies = yield ToAll(DeleteRouters(router=name))
    return {"router": name, "deleted": any(name in r["deleted"] for r in replies)}


def delete_topic(name: str, if_empty: bool = False) -> Steps:
    """Delete a topic and every router with it as source or dest."""
    reply = yield ToTopic(name, DeleteTopic(name, if_empty))
    if reply.get("deleted"):
        replies = yield ToAll(DeleteRouters(source=name))
        removed = set(reply.get("routers_removed") or ())
        removed.update(n for r in replies for n in r["deleted"])
        reply["routers_removed"] = sorted(removed)
    return reply
