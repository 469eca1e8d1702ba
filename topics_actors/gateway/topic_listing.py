"""GET /v0/topics (spec/api.md 5.3): one page of topics by name, filtered by the key's
prefix allowlist (spec/api.md 2: lists are filtered, never refused).

A key limited to prefixes lists only the names under them: each allowed prefix narrows the
requested one (or rules it out), the narrowed listings are merged by name, and the cursor
is the last name returned, so a page never reveals a name the key may not see.
"""

from __future__ import annotations

import heapq

from topics_actors.client.request_shapes import encode_cursor
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.request_body import query_bool, query_int
from topics_actors.limits import LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, clamp

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


async def list_page(engine, key: ApiKey | None, params: dict[str, str]) -> dict:
    prefix = params.get("prefix", "")
    requested = query_int(params, "page_size")
    size = LIST_PAGE_SIZE_DEFAULT if requested is None else clamp(
        requested, 1, LIST_PAGE_SIZE_MAX)
    cursor = params.get("cursor") or None
    touch = query_bool(params, "touch", False)
    if key is None or not key.prefixes:
        page = await engine.list_topics(prefix, size, cursor, touch)
        result = {"topics": [_item(t) for t in page["topics"]]}
        if page.get("next_cursor"):
            result["next_cursor"] = page["next_cursor"]
        return result
    pages = [await engine.list_topics(p, size, cursor, touch)
             for p in narrowed_prefixes(prefix, key.prefixes)]
    merged = list(heapq.merge(*(p["topics"] for p in pages), key=lambda t: t["topic"]))
    more = len(merged) > size or any(p.get("next_cursor") for p in pages)
    result = {"topics": [_item(t) for t in merged[:size]]}
    if more and result["topics"]:
        result["next_cursor"] = encode_cursor(result["topics"][-1]["topic"])
    return result
