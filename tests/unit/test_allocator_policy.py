"""The C allocator's policy (topics_actors/allocator_policy.py): large buffers freed go back
to the kernel even after glibc has seen one freed, with small blocks allocated among them.

Method: a fresh interpreter frees one 1 MiB buffer (unsettled glibc would raise its mmap
threshold to that size here), then allocates 64 more with a malloc-sized object after each,
frees them and reports its anonymous memory. Unsettled, the 64 MiB stay (they lie in the
heap under the small objects); settled, each buffer was a mapping of its own and is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topics_actors import allocator_policy

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(allocator_policy._LIBC is None, reason="glibc only")]

PROBE = """
import sys
from topics_actors.allocator_policy import release_free_memory, settle_allocator
def anon_mib():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) >> 10
if sys.argv[1] == "settled":
    assert settle_allocator()
first = bytearray(1 << 20); first[:] = b"y" * (1 << 20); del first
start = anon_mib()
blocks, pins = [], []
for i in range(64):
    block = bytearray(1 << 20); block[::4096] = b"x" * 256
    blocks.append(block)
    pins.append(bytes(600 + i))
grown = anon_mib() - start
del blocks, block
kept = anon_mib() - start
release_free_memory()
print(grown, kept, anon_mib() - start)
"""


def _probe(mode: str) -> list[int]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         timeout=50, env={**os.environ, "PYTHONPATH": root}, check=True)
    return [int(n) for n in out.stdout.split()]


def test_settled_large_buffers_go_back_when_freed():
    grown, kept, trimmed = _probe("settled")
    assert grown >= 60 and kept < 8 and trimmed < 8


def test_a_trim_gives_back_what_an_unsettled_heap_kept():
    grown, _kept, trimmed = _probe("plain")
    assert grown >= 60 and trimmed < 8
