"""The byte layout of segment files (spec/storage.md 1.4, 1.5), shared by the record frames
(segment.py) and the batch frames (segment_batch.py) of a `.data` file and their `.idx`
entries."""

from __future__ import annotations

import struct

from topics_actors.storage.frame_types import FLAG_META, FLAG_NODE, FLAG_TAG, HOPS_MASK

SEGMENT_FORMAT_VERSION = 1
DATA_HEADER = struct.Struct("<IBQQHHI")   # frame_len, flags, seq, ts, node/tag/data lengths
DATA_HEADER_BYTES = DATA_HEADER.size          # 29
IDX_ENTRY = struct.Struct("<IIQB3x")          # offset, len, ts, flags
IDX_ENTRY_BYTES = IDX_ENTRY.size              # 20
DATA_FRAME_LEN_MIN = DATA_HEADER_BYTES - 4 + 8 + 1   # 34: a record frame of no sections
DEL_LIVE = 0x00
DEL_DELETED = 0xD5
SEGMENT_FLAGS = FLAG_TAG | FLAG_NODE | FLAG_META | HOPS_MASK   # hops: a router's copy
# Bit 2 (the WAL's durable bit, never kept in a segment) marks a batch frame, in its flags
# and in the .idx entry of each of its records (ours: segment_batch.py).
FLAG_BATCH = 0x04
CHECKSUM = struct.Struct("<Q")
