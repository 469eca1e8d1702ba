"""A follower's cut (ledger/log_truncation.py) applied to one topic's segments of a
checkpoint pass: they forget the records after the cut's last seq.

A segment holding only dropped records is forgotten (no snapshot lists it: the reclaimer's
sweep removes it, or the next segment starting at its first seq overwrites it); one holding
both is reopened at the cut, its count and .data length taken back, so the next flush
writes the leader's records over the dropped ones (bytes past a segment's listed count are
never read).
"""

from __future__ import annotations

from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import OpenSegment, SegmentReader, cut_before


def cut_segments(fs: Fs, reader: SegmentReader, directory: str, sealed: list[list[int]],
                 segment: OpenSegment | None,
                 last: int) -> tuple[OpenSegment | None, list[list[int]]]:
    """(the topic's open segment after the cut, its sealed [first, count, bytes] kept), from
    its sealed segments of this pass and its open one (flushed) in `directory`."""
    if segment is not None:
        segment.close()
        sealed.append([segment.first_seq, segment.count, segment.data_len])
    kept = [s for s in sealed if s[0] + s[1] - 1 <= last]
    straddling = [s for s in sealed if s[0] <= last < s[0] + s[1] - 1]
    for first, *_ in sealed:
        reader.forget(directory, first)
    if straddling:
        first = straddling[0][0]
        cut = cut_before(fs, directory, first, last + 1)
        reopened = OpenSegment(fs, directory, first, cut.data_len, cut.count)
        reopened.first_ts = cut.first_ts
        if cut.kept:              # the cut goes through a batch frame: its head is kept
            reopened.add_texts(*cut.kept)
        return reopened, kept
    if segment is not None and segment.first_seq + segment.count - 1 == last:
        kept.pop()                       # the open segment ends at the cut: it stays open
        return segment, kept
    return None, kept
