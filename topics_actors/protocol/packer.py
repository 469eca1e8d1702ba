"""msgpack packing with one Packer per thread, kept.

`msgpack.packb` makes a Packer per call, and each Packer allocates a 256 KiB buffer. Every
node process pins glibc's mmap threshold at 128 KiB (allocator_policy.py), so that buffer
is a fresh mapping each time: mmap, page faults, munmap, about 13 us for a claim's reply
against 1.7 us with a kept Packer, and every request and reply of a shard and a gateway is
packed once. A Packer is not shared between threads (its buffer is its state), and one
that grew for a large message is dropped rather than kept at that size.
"""

from __future__ import annotations

import threading

import msgpack

KEEP_BYTES_MAX = 256 * 1024      # a Packer whose buffer grew past this is not kept
_LOCAL = threading.local()


def pack(obj) -> bytes:
    """msgpack.packb(obj, use_bin_type=True), without a Packer made per call."""
    packer = getattr(_LOCAL, "packer", None)
    if packer is None:
        packer = _LOCAL.packer = msgpack.Packer(use_bin_type=True)
    raw = packer.pack(obj)
    if len(raw) > KEEP_BYTES_MAX:
        del _LOCAL.packer
    return raw
