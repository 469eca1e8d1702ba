"""The node-wide live-bytes quota (`TOPICS_MAX_TOTAL_BYTES`), shared by every shard.

Each shard owns one 8-byte slot of a small file in the node's run directory (created and
zeroed by the supervisor at start) and writes its live bytes there after every commit;
admission adds up every slot. Reading the other shards' slots costs a few loads and no
message, so the write path never waits on another process. The price is a short race: two
shards admitting at the same instant can each see the other's old total, so the quota can be
exceeded by at most one in-flight batch per shard.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable

from topics_actors.errors import ErrorCode, TopicsError

SLOTS = 64                      # the most shards a node runs (TOPICS_WAL_SHARDS <= 64)
SLOT = struct.Struct("<Q")
FILE_BYTES = SLOTS * SLOT.size


def create_file(path: str) -> None:
    """Create (or zero) the slot file; the supervisor does this before any shard starts."""
    with open(path, "wb") as f:
        f.write(bytes(FILE_BYTES))


class ByteQuota:
    def __init__(self, path: str | None, shard: int, max_total_bytes: int):
        self.max_total_bytes = max_total_bytes if path else 0
        self.offset = shard * SLOT.size
        self.pending_bytes = 0          # admitted into the batch being built, not yet live
        self.own_bytes: int | None = None   # this shard's live bytes at its last commit
        self._view: mmap.mmap | None = None
        if self.max_total_bytes:
            fd = os.open(path, os.O_RDWR)
            try:
                self._view = mmap.mmap(fd, FILE_BYTES)
            finally:
                os.close(fd)

    def admit(self, batch_bytes: int, live_bytes: Callable[[], int]) -> None:
        """Refuse a batch that would lift the node's live bytes over the quota. Between
        commits this shard's bytes only grow by what was admitted (anything else frees
        space), so `live_bytes()` (a sum over every topic) is taken once, not per append."""
        if not self.max_total_bytes:
            return
        if self.own_bytes is None:
            self.own_bytes = live_bytes()
        view = self._view
        others = sum(SLOT.unpack_from(view, at)[0] for at in range(0, FILE_BYTES, SLOT.size)
                     if at != self.offset)
        total = others + self.own_bytes + self.pending_bytes + batch_bytes
        if total > self.max_total_bytes:
            raise TopicsError(
                f"the node holds its maximum of {self.max_total_bytes} live bytes; retry "
                "after retention or deletes free space", ErrorCode.THROTTLED,
                {"limit": "max_total_bytes", "max": self.max_total_bytes})
        self.pending_bytes += batch_bytes

    def publish(self, live_bytes: int) -> None:
        """After a commit: the batch is live (or failed); show the others this shard's bytes."""
        self.pending_bytes = 0
        self.own_bytes = live_bytes
        if self._view is not None:
            SLOT.pack_into(self._view, self.offset, live_bytes)

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None
