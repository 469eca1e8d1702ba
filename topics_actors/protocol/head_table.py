"""The head table: a shard's caught-up read answers, in shared memory for its gateways
(docs/PROTOCOL.md 3.9).

Why: a diff whose cursor is at the head is the commonest read of a live topic, and its
answer is two numbers (the head and the earliest seq). Asked of the shard, it costs a hop
to another process and back, which on a small machine is most of the read's time. The
shard writes those two numbers into this table at every commit that may change them; a
gateway that learned a topic's slot from an earlier diff reply answers the next caught-up
diff from the table, without a message.

Layout: a file of 8-byte native words, next to the shard's ipc socket (`shard-NN.heads`).
Word 0 is a magic number, word 1 the incarnation: a random number the shard draws each time
it opens the table, so a gateway never believes a slot written by a previous run of the
shard. Slot i takes SLOT_WORDS words from word HEADER_WORDS + i * SLOT_WORDS:
  seq      even while the slot is stable, odd while the shard writes it (a seqlock)
  tid      the topic's id (topic_identity.topic_id); 0: the slot is free
  head     the head a caught-up reader is shown (the topic's visible head)
  earliest the topic's earliest seq
  read_ms  when a gateway last answered a read from the slot (wall clock ms), written by
           the gateways and taken into the topic's last_read_ts by the shard

Each word is read and written whole: a memoryview cast to "Q" moves an aligned 8-byte
word with one load or store. The seqlock's ordering relies on the CPU keeping stores in
program order (x86-64's TSO); elsewhere the table is not used (`supported`).
"""

from __future__ import annotations

import mmap
import os
import platform
import secrets

from topics_actors.protocol.lane import path_beside

MAGIC = 0x3130_4441_4548_5054          # "TPHEAD01" in the file's first word
HEADER_WORDS = 2
SLOT_WORDS = 5
SEQ, TID, HEAD, EARLIEST, READ_MS = range(SLOT_WORDS)
SLOTS_MAX = 1 << 16                    # 2.5 MiB of disk and address space
TABLE_BYTES = (HEADER_WORDS + SLOTS_MAX * SLOT_WORDS) * 8
HEADS_SUFFIX = ".heads"

Slot = tuple[int, int, int]            # (incarnation, slot, tid): a topic's place


def supported() -> bool:
    """Whether this CPU keeps stores in order, which the seqlock needs."""
    return platform.machine().lower() in ("x86_64", "amd64")


class HeadTable:
    """The table over a buffer of TABLE_BYTES (a shared map, or a bytearray in tests)."""

    def __init__(self, buffer):
        self.words = memoryview(buffer).cast("B").cast("Q")

    @property
    def incarnation(self) -> int:
        return self.words[1]

    def begin(self) -> int:
        """Start a run of the shard: a new incarnation, so every slot a gateway learned
        before is void; returns it. The slots are not cleared (that would touch every
        page): `write` makes a slot whole again when the shard gives it out."""
        words = self.words
        words[0] = MAGIC
        words[1] = incarnation = secrets.randbits(63) | 1
        return incarnation

    def write(self, slot: int, tid: int, head: int, earliest: int) -> None:
        """The shard's publication of a slot (tid 0: the slot is free). The seq is made odd
        first, whatever a previous run left there."""
        words, at = self.words, HEADER_WORDS + slot * SLOT_WORDS
        seq = words[at] | 1
        words[at] = seq
        words[at + TID] = tid
        words[at + HEAD] = head
        words[at + EARLIEST] = earliest
        words[at] = seq + 1

    def read(self, place: Slot) -> tuple[int, int] | None:
        """(head, earliest) of the slot at `place`, None unless it holds that topic in that
        incarnation, stable from the first word read to the last."""
        words = self.words
        incarnation, slot, tid = place
        at = HEADER_WORDS + slot * SLOT_WORDS
        seq = words[at]
        if seq & 1 or words[1] != incarnation or words[at + TID] != tid:
            return None
        head, earliest = words[at + HEAD], words[at + EARLIEST]
        if words[at] != seq or words[1] != incarnation:
            return None
        return head, earliest

    def touch(self, slot: int, now_ms: int) -> None:
        self.words[HEADER_WORDS + slot * SLOT_WORDS + READ_MS] = now_ms

    def read_ms(self, slot: int) -> int:
        return self.words[HEADER_WORDS + slot * SLOT_WORDS + READ_MS]

    def clear_read_ms(self, slot: int) -> None:
        self.words[HEADER_WORDS + slot * SLOT_WORDS + READ_MS] = 0

    def release(self) -> None:
        self.words.release()


def heads_path(ipc: str) -> str:
    """`<run>/shard-NN.heads` beside the shard's `ipc://<run>/shard-NN.sock` ("" if none)."""
    return path_beside(ipc, HEADS_SUFFIX)


def map_table(path: str, create: bool) -> mmap.mmap | None:
    """The table file mapped shared. `create` (the shard) makes it or grows it to size,
    keeping its inode, so a gateway's map of it stays the same file; its blocks are
    allocated then (posix_fallocate), so that a write into a page never needs a block: on a
    full disk a sparse page would fail its first write with SIGBUS. OSError: no table (a
    full disk, a file system without it). None: a reader found no table of full size."""
    flags = os.O_RDWR | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        if create:
            os.posix_fallocate(fd, 0, TABLE_BYTES)
        elif os.fstat(fd).st_size < TABLE_BYTES:
            return None
        return mmap.mmap(fd, TABLE_BYTES)
    finally:
        os.close(fd)
