"""The compactor's path for plain Appends (storage/segment.py OpenSegment.add_plain): the
segment bytes it builds are those of the general re-framing of a WAL frame."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors.storage.frame import encode_frame
from topics_actors.storage.frame_types import FLAG_DURABLE, FLAG_META, FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import OpenSegment


def wal_append(seq: int, ts: int, data: bytes, flags: int) -> bytes:
    return encode_frame(FrameType.APPEND, 7, seq, ts, data, b"", b"", flags)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.tuples(st.sampled_from([0, FLAG_META, FLAG_DURABLE | FLAG_META,
                                                  FLAG_DURABLE | 0x30]),
                                  st.integers(0, 2**64 - 1), st.binary(max_size=300)),
                        min_size=1, max_size=20),
       first=st.integers(4, 2**40), durable=st.integers(0, 3), as_view=st.booleans())
def test_add_plain_writes_the_bytes_of_add_from_wal(records, first, durable, as_view):
    """The compactor's path for a plain Append (no node, no tag; the scan already unpacked
    it) builds exactly the segment the general re-framing builds, from bytes or a view."""
    wal = b"".join(wal_append(first + i, ts, data, flags)
                   for i, (flags, ts, data) in enumerate(records))
    view = memoryview(wal) if as_view else wal
    # `durable` records already in the file (a reopened segment): first_ts is not reset
    general, plain = (OpenSegment(RealFs(), "/nowhere", first - durable, durable * 40, durable)
                      for _ in range(2))
    offset = 0
    for i, (flags, ts, data) in enumerate(records):
        general.add_from_wal(view, offset, ts)
        plain.add_plain(view, offset, flags, first + i, ts, len(data))
        offset += len(wal_append(first + i, ts, data, flags))
    assert (plain.data_buf, plain.idx_buf) == (general.data_buf, general.idx_buf)
    assert (plain.first_ts, plain.next_seq) == (general.first_ts, first + len(records))
