"""One page of topic names from the pages of several shards (each sorted by name): what a
node's topic listing is, for the client library and for the supervisor's front alike.
"""

from __future__ import annotations

import heapq


def merged_topics(pages: list[dict], page_size: int) -> tuple[list[dict], bool]:
    """(the first `page_size` items of per-shard pages, each sorted by name, in name order;
    whether more names match after them)."""
    merged = list(heapq.merge(*(p["topics"] for p in pages), key=lambda t: t["topic"]))
    return merged[:page_size], len(merged) > page_size or any(p["more"] for p in pages)
