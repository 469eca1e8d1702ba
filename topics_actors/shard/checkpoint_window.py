"""Whether a checkpoint may be reading this shard's WAL now: from a barrier (staged here,
or read in the WAL by the recovery, past the snapshot it loaded) until a snapshot is taken
in. The compactor runs one checkpoint at a time and sends `absorbed` only after writing
its snapshot, so a snapshot taken in after the last barrier covers that barrier.

A follower's in-place truncation (shard/replication/replica_book.py) waits for a closed window: a
checkpoint whose barrier lies between the records a truncation drops and its Truncate frame
would put those records into segments the shard then serves in place of the leader's.
A checkpoint that fails keeps the window open until the next one succeeds (meanwhile a
diverged copy is reset whole, which is always safe).
"""

from __future__ import annotations


class CheckpointWindow:
    def __init__(self):
        self.open = False
        self.barriers = 0         # staged (or found by the recovery) since the process began
        self.taken_in = 0         # snapshots taken in since the process began

    def barrier(self) -> None:
        self.open = True
        self.barriers += 1

    def absorbed(self, barriers_before: int) -> None:
        """A snapshot was taken in; `barriers_before`: the barriers counted when its
        `absorbed` arrived (a barrier staged since belongs to a later checkpoint)."""
        self.taken_in += 1
        if self.barriers == barriers_before:
            self.open = False
