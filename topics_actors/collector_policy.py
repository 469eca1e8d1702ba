"""How a node process runs Python's cyclic garbage collector.

The request paths allocate many short-lived containers (a dict per record of a parsed
HTTP body, a reply per request) that reference counting frees at once; the default
collector still runs its young-generation pass every 700 net allocations and, at most every
hundred of those, a full pass over every object the process holds. In the gateway that
was about 4% of its CPU and the p99 of single appends doubled (docs/BENCHMARKS_HISTORY.md,
"The collector"). Cycles are rare here (an exception's traceback, a few asyncio internals), so
passes far apart lose nothing; and the objects made while starting (modules, classes,
settings) are frozen out of every pass for good.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000      # net allocations between passes over the youngest objects
MIDDLE_THRESHOLD = 20         # young passes between passes over the middle generation
OLD_THRESHOLD = 100           # middle passes between full passes


def settle_collector() -> None:
    """Freeze what exists now and space the collector's passes out; call once, when the
    process has finished importing and before it serves.

    The pass before the freeze leaves the oldest generation alone: a full collection also
    empties the interpreter's free lists into the allocator's pools, and in a child forked
    from the fork server those writes copied 0.6 MB of pages it shared (docs/OPERATIONS.md
    17). What it leaves is the few cycles of a start, frozen for good."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
