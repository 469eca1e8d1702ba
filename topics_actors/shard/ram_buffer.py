"""An ephemeral topic's records in memory: chunks of frames, dropped whole once dead.

The records of an ephemeral topic are frames written into RAM chunks, each registered in
the shard's file table under a file number of its own and located like WAL records (file
number << 40 | offset). A topic appends to its open chunk (`topic.ram`, a bytearray); once
that holds CHUNK_BYTES the next batch starts a new one, and the full one is kept as bytes of
its exact size (a bytearray that grew by appends holds up to an eighth more than it uses).
Once every record of a closed chunk is below the topic's floors (evicted by its cap or
TTL, deleted below a seq), `trim` drops the chunk and the index slots below the floor: no
copy, no record moved. A topic thus holds its live frames, at most one chunk of dead ones,
the open chunk's slack, and 8 bytes of index per live record.

A topic whose records moved to a segment-backed class keeps the seqs it absorbed from RAM
in `ram_past`; its chunks are left alone (they go with the topic).
"""

from __future__ import annotations

import collections

from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage.file_table import FileTable

CHUNK_BYTES = 256 * 1024
INDEX_TRIM_MIN = 4096        # index slots below the floor worth a move of the rest


def open_chunk(topic: TopicState, files: FileTable, first: int) -> None:
    """Give `topic` an open chunk with room for the batch from seq `first` on."""
    if topic.ram is not None and len(topic.ram) < CHUNK_BYTES:
        return
    if topic.ram is not None:
        files.add_buffer(bytes(topic.ram), file_no=topic.ram_file)   # its exact size
        if topic.ram_chunks is None:
            topic.ram_chunks = collections.deque()
        topic.ram_chunks.append((topic.ram_file, first - 1, len(topic.ram)))
    topic.ram = bytearray()
    topic.ram_file = files.add_buffer(topic.ram)


def trim(topic: TopicState, files: FileTable) -> None:
    """Drop the closed chunks, and the index slots, that only hold seqs below the floors."""
    if topic.ram_past:
        return
    floor = live_floor(topic)
    chunks = topic.ram_chunks or ()
    while chunks and chunks[0][1] <= floor:
        files.remove(chunks.popleft()[0])
    dead = min(floor + 1 - topic.wal_base, len(topic.locs))
    if dead >= max(INDEX_TRIM_MIN, len(topic.locs) // 4):
        del topic.locs[:dead]
        topic.wal_base += dead
        topic.front = max(0, topic.front - dead)
    if topic.deleted and topic.deleted.first() <= floor:   # never read again
        topic.deleted.drop_through(floor)


def ram_files(topic: TopicState) -> list[int]:
    """The file numbers of every chunk of the topic (none for a topic never ephemeral)."""
    closed = [chunk[0] for chunk in topic.ram_chunks or ()]
    return closed + ([topic.ram_file] if topic.ram_file else [])


def ram_bytes(topic: TopicState) -> int:
    """What the topic's chunks hold (the open one by its length)."""
    return ((len(topic.ram) if topic.ram is not None else 0)
            + sum(chunk[2] for chunk in topic.ram_chunks or ()))


def drop_all(topic: TopicState, drop_buffer) -> None:
    """Release every chunk (the topic is gone)."""
    for file_no in ram_files(topic):
        drop_buffer(file_no)
