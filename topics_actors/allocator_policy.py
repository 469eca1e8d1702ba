"""How a node process keeps C heap memory it freed from staying in its resident set.

glibc's malloc serves a request above its mmap threshold (128 KiB at start) with a mapping
of its own, given back to the kernel on free. But it raises that threshold to the size of
any such block freed, up to 32 MiB, and the trim threshold with it. After one checkpoint
has buffered and freed a few large segment buffers, every later buffer of that size comes
from the main heap, whose free pages go back only from its very top: one small object
allocated above them keeps them all. The compactor of a node under a steady load held about
180 MiB of such free pages (docs/BENCHMARKS.md, "Memory of the whole node").

settle_allocator() pins both thresholds at glibc's starting values, so a large buffer is a
mapping for the whole life of the process; release_free_memory() hands back the free pages
in the middle of the heap (malloc_trim) after work that freed much at once. Elsewhere than
glibc both do nothing.
"""

from __future__ import annotations

import logging

from topics_actors.libc import LIBC as _LIBC

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1          # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 128 * 1024   # glibc's own starting value of both


def settle_allocator() -> bool:
    """Pin the mmap and trim thresholds (call once at start); whether it applied."""
    if _LIBC is None:
        return False
    done = (_LIBC.mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES) == 1
            and _LIBC.mallopt(M_TRIM_THRESHOLD, THRESHOLD_BYTES) == 1)
    if not done:
        log.warning("event=allocator_not_settled")
    return done


def release_free_memory() -> None:
    """Give free heap pages back to the kernel (a few ms for a heap of 100 MiB)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
