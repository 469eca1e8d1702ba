"""GET /v0/topics (spec/api.md 5.3): one page of topics by name, filtered by the key's
prefix allowlist (spec/api.md 2: lists are filtered, never refused).

A key limited to prefixes lists only the names under them: each allowed prefix narrows the
requested one (or rules it out), the narrowed listings are merged by name, and the cursor
is the last name returned, so a page never reveals a name the key may not see.

On a cluster node the listing is the whole cluster's (docs/CLUSTER.md 9): the node's own
topics merged with the names of every topic state the cluster holds; a topic another node
leads is described by its leader (a `get_topic` there, as every request for it goes).
"""

from __future__ import annotations

import asyncio
import heapq

from topics_actors.client.request_shapes import decode_cursor, encode_cursor
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.request_body import query_bool, query_int
from topics_actors.limits import LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, clamp
from topics_actors.protocol.messages import GetTopic

# `durability` is this build's addition to the reference's item (docs/HTTP.md 8.3)
_ITEM_KEYS = ("topic", "head_seq", "earliest_seq", "count", "bytes", "durable",
              "effective_priority", "durability")


def narrowed_prefixes(requested: str, allowed: tuple[bytes, ...]) -> list[str]:
    """The prefixes to list so that a name matches `requested` and some allowed prefix;
    none that another one already covers."""
    want = requested.encode()
    found = set()
    for prefix in allowed:
        if prefix.startswith(want):
            found.add(prefix)
        elif want.startswith(prefix):
            found.add(want)
    kept = sorted(found)
    narrowed = [p for p in kept if not any(p != q and p.startswith(q) for q in kept)]
    return [p.decode("utf-8", "replace") for p in narrowed]


def _item(raw: dict) -> dict:
    return {name: raw[name] for name in _ITEM_KEYS}


def _item_of_state(state: dict) -> dict:
    """A list item from a `get_topic` answer (the leader's)."""
    config = state["config"]
    return {"topic": state["topic"], "head_seq": state["head_seq"],
            "earliest_seq": state["earliest_seq"], "count": state["count"],
            "bytes": state["bytes"], "durable": config["durable"],
            "effective_priority": state["effective_priority"],
            "durability": config["durability"]}


async def _lister(engine):
    """engine.list_topics, or on a cluster node one that lists the whole cluster."""
    cluster = (await engine.node_status()).get("cluster")
    if cluster is None:
        return engine.list_topics

    async def listed(prefix: str, size: int, cursor: str | None, touch: bool) -> dict:
        return await _cluster_page(engine, cluster, prefix, size, cursor, touch)
    return listed


async def _cluster_page(engine, cluster: dict, prefix: str, size: int, cursor: str | None,
                        touch: bool) -> dict:
    """One page by name of this node's topics and the cluster's. The node's own page bounds
    the names taken (past its last name, when it has more, the next page goes on), so no
    name is skipped; a topic led elsewhere is asked of its leader."""
    local = await engine.list_topics(prefix, size, cursor, touch)
    own = {raw["topic"]: raw for raw in local["topics"]}
    bound = local["topics"][-1]["topic"] if local.get("next_cursor") and own else None
    after, node = decode_cursor(cursor), cluster.get("node_id")
    states = cluster.get("topics", {})
    names = sorted(set(own) | {name for name in states if name.startswith(prefix)
                               and name > after and (bound is None or name <= bound)})
    page = names[:size]
    leaders = {name: states[name]["leader"] if name in states else node for name in page}
    elsewhere = [name for name in page if leaders[name] not in (node, None)
                 or (name not in own and leaders[name] == node)]
    replies = await asyncio.gather(*(engine.call(name, GetTopic(name, touch))
                                     for name in elsewhere), return_exceptions=True)
    items = {name: own[name] for name in page if name in own}
    unavailable = [name for name in page if leaders[name] is None and name not in own]
    for name, reply in zip(elsewhere, replies):
        if isinstance(reply, dict):
            items[name] = _item_of_state(reply)
        elif not isinstance(reply, TopicsError):
            raise reply
        elif reply.code is ErrorCode.TOPIC_NOT_FOUND:
            items.pop(name, None)            # deleted meanwhile
        elif name not in own:
            unavailable.append(name)         # offline, or its leader did not answer in time
    result = {"topics": [items[name] for name in page if name in items]}
    if unavailable:
        result["unavailable"] = unavailable
    last = page[-1] if len(names) > size else bound
    if last is not None:
        result["next_cursor"] = encode_cursor(last)
    return result


async def list_page(engine, key: ApiKey | None, params: dict[str, str]) -> dict:
    prefix = params.get("prefix", "")
    requested = query_int(params, "page_size")
    size = LIST_PAGE_SIZE_DEFAULT if requested is None else clamp(
        requested, 1, LIST_PAGE_SIZE_MAX)
    cursor = params.get("cursor") or None
    touch = query_bool(params, "touch", False)
    list_topics = await _lister(engine)
    if key is None or not key.prefixes:
        page = await list_topics(prefix, size, cursor, touch)
        result = {"topics": [_item(t) for t in page["topics"]]}
        if page.get("unavailable"):
            result["unavailable"] = page["unavailable"]
        if page.get("next_cursor"):
            result["next_cursor"] = page["next_cursor"]
        return result
    pages = [await list_topics(p, size, cursor, touch)
             for p in narrowed_prefixes(prefix, key.prefixes)]
    merged = list(heapq.merge(*(p["topics"] for p in pages), key=lambda t: t["topic"]))
    more = len(merged) > size or any(p.get("next_cursor") for p in pages)
    result = {"topics": [_item(t) for t in merged[:size]]}
    unavailable = [name for p in pages for name in p.get("unavailable", ())]
    if unavailable:
        result["unavailable"] = unavailable
    if more and result["topics"]:
        result["next_cursor"] = encode_cursor(result["topics"][-1]["topic"])
    return result
