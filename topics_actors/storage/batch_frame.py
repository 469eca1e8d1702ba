"""The body of an AppendBatch frame (type 20, ours): a batch of plain records of one topic
in one WAL frame, so that writing, checking and replaying a batch costs one header and one
checksum instead of one per record. The frame codec (frame.py) writes the header around it.

    header      the WAL frame header: type 20; seq = the first record's seq; ts = every
                record's ts; flags: only has_node (the batch's node) and durable;
                node_len = the batch node's length; tag_len = 0; data_len = the body's length
    node        the batch's node (UTF-8), when node_len > 0
    body:
      u32       count               n >= 1
      n x u32   end                 end_i: where record i's text ends in `texts`; strictly
                                    increasing, end_0 >= 1, end_(n-1) = len(texts)
      texts     the records' data JSON texts, back to back

An AppendBatch means exactly what n Append frames (type 1) of seqs seq .. seq + n - 1 would:
each with the frame's ts, flags and node, no tag, no meta, and the envelope {"d":<text_i>}
(record_envelope.py). Every reader of the log takes it so: a record's WAL location is the
location of its batch's frame, and its place in the batch is its seq minus the frame's.
"""

from __future__ import annotations

import struct
import sys
from array import array
from operator import gt

from topics_actors.storage.frame_types import FLAG_DURABLE, FLAG_NODE

FLAGS_ALLOWED = FLAG_NODE | FLAG_DURABLE
_U32 = struct.Struct("<I")
_U32_PAIR = struct.Struct("<II")
_LITTLE = sys.byteorder == "little"


def table_bytes(ends: array) -> bytes:
    """`ends` (an array of u32) as the body's little-endian table."""
    if _LITTLE:
        return ends.tobytes()
    swapped = array("I", ends)
    swapped.byteswap()
    return swapped.tobytes()


def head(ends: array) -> bytes:
    """The body's bytes before its texts: the count and the table."""
    return _U32.pack(len(ends)) + table_bytes(ends)


def table(view, at: int, body_len: int) -> tuple[array, int] | None:
    """(ends, where the texts start) of the body at `at` of `body_len` bytes, or None when
    it breaks a rule of the module docstring (a frame that does is where a scan of the log
    stops)."""
    if body_len < 8:
        return None
    count = _U32.unpack_from(view, at)[0]
    if count < 1 or 4 + 4 * count >= body_len:
        return None
    texts_at = at + 4 + 4 * count
    ends = array("I")
    ends.frombytes(view[at + 4:texts_at])     # bytes, mmap or memoryview alike
    if not _LITTLE:
        ends.byteswap()
    if ends[-1] != body_len - 4 - 4 * count or ends[0] < 1:
        return None
    if count > 1 and not all(map(gt, ends[1:], ends)):
        return None
    return ends, texts_at


def is_valid(flags: int, body) -> bool:
    """Whether a frame's flags and body are a valid AppendBatch's."""
    return not flags & ~FLAGS_ALLOWED and table(body, 0, len(body)) is not None


def count(view, at: int) -> int:
    """How many records the (checked) body at `at` holds."""
    return _U32.unpack_from(view, at)[0]


def text_span(view, at: int, index: int) -> tuple[int, int]:
    """(start, end) in `view` of the text of record `index` of the (checked) body at `at`."""
    total = _U32.unpack_from(view, at)[0]
    if not 0 <= index < total:
        raise IndexError(f"record {index} of a batch of {total}")
    texts_at = at + 4 + 4 * total
    if index:
        start, end = _U32_PAIR.unpack_from(view, at + 4 * index)
    else:
        start, end = 0, _U32.unpack_from(view, at + 4)[0]
    return texts_at + start, texts_at + end
