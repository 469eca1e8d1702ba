"""A replicated topic's records as its leader's WAL holds them: the raw Append frames of a
fetch answer (docs/PROTOCOL.md 6.27, `frames`), asked for by a follower whose fetch says
`frames: true`.

A follower writes a leader's Append frames byte for byte as the leader wrote them (same
topic id, seq, ts, flags, node, tag and envelope), so a leader sends the frames of the
records still in its WAL as they are, in one `bin`: read as spans of frames adjacent in
one WAL file (a span ends wherever the next record's frame is elsewhere: another topic's
frame or a control frame sits between, a hole, another file), the spans joined. These are
still per-topic frames, not shard WAL bytes (spec/replication.md D2): only the topic's
own Appends travel, and the follower appends them through its own WAL and group commit,
among its own frames.

The follower checks every frame of an answer before it stages any (lengths, checksum,
type, topic, seqs, flags: `check`), refuses the whole answer on the first fault, and
otherwise copies them into its batch unchanged (replica_records.py `append_fetched`):
no record is decoded on either side, and neither side encodes one again.
"""

from __future__ import annotations

import logging
import struct
from itertools import repeat
from typing import NamedTuple

import xxhash

from topics_actors.errors import CorruptionError
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_envelope import PLAIN_OVERHEAD, payloads_bytes
from topics_actors.storage import batch_frame
from topics_actors.storage.file_table import OFFSET_BITS, OFFSET_MASK, FileTable
from topics_actors.storage.frame import (
    APPEND_BATCH, FRAME_LEN_MIN, HEADER, HEADER_BYTES, batch_body_at,
)
from topics_actors.storage.frame_types import (
    FLAG_META, FLAG_NODE, FLAG_TAG, FrameType,
)

log = logging.getLogger(__name__)

_frame_len = struct.Struct("<I").unpack_from
_header = HEADER.unpack_from
_digest = xxhash.xxh3_64_intdigest
_APPEND = int(FrameType.APPEND)
_NAMED = FLAG_TAG | FLAG_NODE
_SUMS: dict[int, struct.Struct] = {}     # frame_len -> Struct: checksummed bytes, checksum


class FrameRun(NamedTuple):
    """Frames of contiguous seqs of an answer, checked, ready to stage."""
    first: int              # the seq of its first frame
    ts: int                 # its last frame's ts (the topic's last write once published)
    frames: bytes | memoryview      # the frames, as the leader's WAL holds them
    offsets: list[int]      # where each frame starts in `frames`
    payload_bytes: int      # the records' data and meta bytes (the topic's byte count)


class BadFrames(CorruptionError):
    """A fetch answer's frames fail a check: the answer is refused whole."""


# --- the leader's side --------------------------------------------------------------------

def read(files: FileTable, topic: TopicState, seq: int, budget: int, used: int,
         count: int, count_max: int) -> tuple[bytes, int, int]:
    """The frames of the topic's records from `seq` on, all in the WAL (its index `locs`),
    read as spans of adjacent frames and joined; `used` bytes and `count` records are in
    the answer already. An AppendBatch frame goes whole or not at all: the read stops
    before one that cannot travel as it is (unsent_batch: its records go as records).
    Returns (the frames, the next seq, the bytes used)."""
    locs, base = topic.locs, topic.wal_base
    last = min(topic.head, base + len(locs) - 1)       # a seq past the index is a hole
    spans: list[bytes] = []
    view, view_len, file_loc, start = b"", 0, 0, 0
    expect = -1                   # the location right after the span: its next frame's
    next_seq = topic.head + 1
    while seq <= last:
        loc = locs[seq - base]
        if loc != expect:                              # not the next frame of the span
            if not loc:
                seq += 1
                continue                               # a hole
            if expect > file_loc + start:
                spans.append(_span(files, file_loc, view, start, expect))
            if loc & ~OFFSET_MASK != file_loc:
                file_loc = loc & ~OFFSET_MASK
                view = files.view(loc >> OFFSET_BITS)
                view_len = len(view)
            start, expect = loc - file_loc, loc
        at = loc - file_loc
        if at + 4 > view_len:
            view = files.view(loc >> OFFSET_BITS, at + 4)
            view_len = len(view)
        size = 4 + _frame_len(view, at)[0]
        if at + size > view_len:
            view = files.view(loc >> OFFSET_BITS, at + size)
            view_len = len(view)
        records = 1
        if view[at + 4] == APPEND_BATCH:
            if unsent_batch(files, topic, seq) is not None:
                next_seq = seq
                break
            records = _batch_count(view, at)
        if count and (used + size > budget or count + records > count_max):
            next_seq = seq
            break
        expect = loc + size
        used += size
        count += records
        seq += records
        if count >= count_max:
            next_seq = seq
            break
    if expect > file_loc + start:
        spans.append(_span(files, file_loc, view, start, expect))
    if not spans:
        return b"", next_seq, used
    return spans[0] if len(spans) == 1 else b"".join(spans), next_seq, used


def unsent_batch(files: FileTable, topic: TopicState, seq: int) -> int | None:
    """When `seq`'s record is in an AppendBatch frame that cannot travel as it is (it
    began before `seq`, or a record of it was deleted: a hole in the index), the seq
    after that frame's last record; else None. Those records go as records instead."""
    index = seq - topic.wal_base
    loc = topic.locs[index] if 0 <= index < len(topic.locs) else 0
    if not loc:
        return None
    at = loc & OFFSET_MASK
    view = files.view(loc >> OFFSET_BITS, at + 4)
    view = files.view(loc >> OFFSET_BITS, at + 4 + _frame_len(view, at)[0])
    if view[at + 4] != APPEND_BATCH:
        return None
    first, records = _header(view, at)[4], _batch_count(view, at)
    whole = topic.locs[first - topic.wal_base:first - topic.wal_base + records].count(loc)
    return None if first == seq and whole == records else first + records


def _batch_count(view, at: int) -> int:
    """How many records the AppendBatch frame at `at` holds."""
    return batch_frame.count(view, batch_body_at(at, _header(view, at)[6]))


def _span(files: FileTable, file_loc: int, view, start: int, end_loc: int) -> bytes:
    """The bytes of a span from `start` in the file at `file_loc` up to location `end_loc`
    (mapped again when the file grew past its view)."""
    end = end_loc - file_loc
    if end > len(view):
        view = files.view(file_loc >> OFFSET_BITS, end)
    return view[start:end]


# --- the follower's side ------------------------------------------------------------------

def verified(topic: TopicState, body: dict, stats) -> list[FrameRun] | None:
    """The frames of a fetch answer as runs to stage ([] when it has none), or None when
    it is refused: logged, counted in `stats.fetch_answers_refused`; nothing is staged and
    the fetch is asked again."""
    frames = body.get("frames")
    if frames is None or frames == b"":
        return []
    after = max(body["first_seq"] - 1, topic.next_seq - 1,
                max((record[0] for record in body["records"]), default=0))
    try:
        if not topic.config.logged:
            raise BadFrames("frames for a topic that is not logged")
        return check(topic.tid, frames, after, body["end_leo"])
    except BadFrames as error:
        stats.fetch_answers_refused += 1
        log.error("event=fetch_answer_refused topic=%s first_seq=%d end_leo=%s reason=%s",
                  topic.name, body["first_seq"], body.get("end_leo"), error)
        return None


def check(tid: int, frames: bytes, after: int, end_leo: int) -> list[FrameRun]:
    """Every frame of `frames` checked (BadFrames on the first fault): its length, checksum,
    type (Append), topic id `tid`, seq (strictly ascending, above `after`, below
    `end_leo`), flags and node and tag text, as recovery reads them. Returns the runs of
    contiguous seqs. The hot loop tests the usual case in one condition; _fault() tells
    a hole from a fault."""
    if type(frames) is not bytes or type(end_leo) is not int:
        raise BadFrames("frames is not a bin")
    span, runs = frames, []
    size, pos, start, first, ts = len(span), 0, 0, after + 1, 0
    offsets: list[int] = []
    envelopes = metas = 0
    sums, add = _SUMS, offsets.append
    while pos < size:
        if size - pos < 4 + FRAME_LEN_MIN:
            raise BadFrames(f"a frame cut short at byte {pos}")
        (frame_len, ftype, flags, frame_tid, seq, ts_now,
         node_len, tag_len, data_len) = _header(span, pos)
        end = pos + 4 + frame_len
        if (seq != after + 1 or end > size or 42 + node_len + tag_len + data_len != frame_len
                or ftype != _APPEND or frame_tid != tid or seq >= end_leo):
            _fault(span, pos, tid, after, end_leo)       # raises unless after a hole
            if offsets and seq != after + 1:
                runs.append(_run(span, first, ts, start, pos, offsets, envelopes, metas))
                offsets, envelopes, metas = [], 0, 0
                add = offsets.append
            if not offsets:
                first, start = seq, pos
        body, checksum = (sums.get(frame_len) or _sum_struct(frame_len)).unpack_from(span, pos)
        if _digest(body) != checksum:
            raise BadFrames(f"checksum of the frame at byte {pos} (seq {seq})")
        if node_len or tag_len:
            _check_text(span, pos, flags, node_len, tag_len, seq)
        elif flags & _NAMED:
            raise BadFrames(f"flags {flags:#x} of seq {seq} name a node or tag it lacks")
        if ftype == APPEND_BATCH:
            records, texts = _checked_batch(span, pos, flags, node_len, data_len, seq,
                                            end_leo)
            offsets += repeat(pos, records)
            envelopes += texts + records * PLAIN_OVERHEAD
            seq += records - 1
        else:
            add(pos)
            envelopes += data_len
            metas += flags & FLAG_META
        after, pos, ts = seq, end, ts_now
    if offsets:
        runs.append(_run(span, first, ts, start, size, offsets, envelopes, metas))
    return runs


def _fault(span: bytes, pos: int, tid: int, after: int, end_leo: int) -> None:
    """Why the frame at `pos` failed the hot loop's test (BadFrames); returns when it is
    well formed and only follows a hole (its seq above after + 1, below end_leo)."""
    (frame_len, ftype, _flags, frame_tid, seq, _ts,
     node_len, tag_len, data_len) = _header(span, pos)
    if pos + 4 + frame_len > len(span) or 42 + node_len + tag_len + data_len != frame_len:
        raise BadFrames(f"frame lengths at byte {pos} do not add up")
    if ftype not in (_APPEND, APPEND_BATCH) or frame_tid != tid:
        raise BadFrames(f"frame of type {ftype}, topic id {frame_tid} at byte {pos}")
    if not after < seq < end_leo:
        raise BadFrames(f"seq {seq} after seq {after} (end_leo {end_leo})")


def _checked_batch(span: bytes, pos: int, flags: int, node_len: int, data_len: int,
                   seq: int, end_leo: int) -> tuple[int, int]:
    """(records, their texts' bytes) of the AppendBatch frame at `pos`, whose header and
    checksum were checked: its body as recovery reads it, its seqs below `end_leo`."""
    found = None
    if not flags & ~batch_frame.FLAGS_ALLOWED:
        found = batch_frame.table(span, batch_body_at(pos, node_len), data_len)
    if found is None:
        raise BadFrames(f"AppendBatch at byte {pos} (seq {seq}): its body breaks its rules")
    ends = found[0]
    if seq + len(ends) > end_leo:
        raise BadFrames(f"AppendBatch at byte {pos}: seqs {seq}..{seq + len(ends) - 1} "
                        f"reach end_leo {end_leo}")
    return len(ends), ends[-1]


def _sum_struct(frame_len: int) -> struct.Struct:
    """The Struct of a frame of `frame_len` unpacking what its checksum covers and the
    checksum; cached per length (cleared when it holds 4096)."""
    if len(_SUMS) >= 4096:
        _SUMS.clear()
    st = _SUMS[frame_len] = struct.Struct(f"<4x{frame_len - 8}sQ")
    return st


def _check_text(span: bytes, pos: int, flags: int, node_len: int, tag_len: int,
                seq: int) -> None:
    """The flags name the node and the tag the frame has, and both decode as recovery
    decodes them (a frame that does not is where a WAL scan stops)."""
    if flags & _NAMED != (FLAG_TAG if tag_len else 0) | (FLAG_NODE if node_len else 0):
        raise BadFrames(f"flags {flags:#x} against node and tag lengths at seq {seq}")
    at = pos + HEADER_BYTES
    try:
        span[at:at + node_len].decode()
        span[at + node_len:at + node_len + tag_len].decode()
    except UnicodeDecodeError:
        raise BadFrames(f"node or tag of seq {seq} is not UTF-8") from None


def _run(span: bytes, first: int, ts: int, start: int, end: int, offsets: list[int],
         envelopes: int, metas: int) -> FrameRun:
    """The frames of `span` in [start, end), starting at `offsets`: a run from seq `first`
    to one of time `ts`, whose envelopes are `envelopes` bytes, `metas` // FLAG_META of
    them with meta."""
    frames = span if start == 0 and end == len(span) else memoryview(span)[start:end]
    if start:
        offsets = [offset - start for offset in offsets]
    return FrameRun(first, ts, frames, offsets,
                    payloads_bytes(envelopes, len(offsets), metas // FLAG_META))
