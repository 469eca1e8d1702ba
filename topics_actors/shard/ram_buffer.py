"""An ephemeral topic's records in memory: its RAM buffer, and keeping it to what is live.

The records of an ephemeral topic are frames appended to one bytearray, registered in the
shard's file table under a file number of its own, and located like WAL records
(file number << 40 | offset). Appends only add to it, so records below the topic's floors
(evicted by its cap or TTL, deleted below a seq) would stay for ever: a capped topic under
a steady load would grow without bound. Once those dead records take at least a quarter of
the buffer (and TRIM_BYTES_MIN), `trim` copies the live rest into a new buffer under a new
file number, gives the records kept their new locations and drops the slots below the floor
from the topic's index. The buffer then stays within 4/3 of the live frames plus
TRIM_BYTES_MIN, and each byte is copied a few times over its life, not once per append.

A topic whose records moved to a segment-backed class keeps the seqs it absorbed from the
buffer in `ram_past`; such a buffer is left alone (it is dropped with the topic).
"""

from __future__ import annotations

from array import array

from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage.file_table import OFFSET_BITS, OFFSET_MASK, FileTable, make_loc

TRIM_BYTES_MIN = 1 << 20
TRIM_FRACTION = 0.25


def trim(topic: TopicState, files: FileTable) -> bool:
    """Drop the buffer's frames below the floors if they are worth a copy; whether it did."""
    ram, ram_file = topic.ram, topic.ram_file
    if ram is None or topic.ram_past or len(ram) < TRIM_BYTES_MIN:
        return False
    floor = live_floor(topic)
    first = max(0, min(floor + 1 - topic.wal_base, len(topic.locs)))
    locs = topic.locs
    cut = len(ram)        # where the first live frame of the buffer starts
    for index in range(first, len(locs)):
        if locs[index] >> OFFSET_BITS == ram_file:
            cut = locs[index] & OFFSET_MASK
            break
    if cut < max(TRIM_BYTES_MIN, TRIM_FRACTION * len(ram)):
        return False
    kept = bytearray(ram[cut:])
    kept_file = files.add_buffer(kept)
    shift = make_loc(ram_file, cut) - make_loc(kept_file, 0)
    topic.locs = array("Q", [loc - shift if loc >> OFFSET_BITS == ram_file else loc
                             for loc in locs[first:]])
    topic.wal_base += first
    topic.front = max(0, topic.front - first)
    files.remove(ram_file)
    topic.ram, topic.ram_file = kept, kept_file
    if topic.deleted and topic.deleted.first() <= floor:   # never read again
        topic.deleted.drop_through(floor)
    return True
