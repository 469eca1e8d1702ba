"""Where a WAL file's log ends, and whether that end is a lost tail or damage inside the log.

A scan stops at the first frame that fails a check. What follows decides what it means:

- nothing (the end of the file) or zeros (the preallocated rest): the log simply ends. A
  run of zeros shorter than ZERO_RUN_MAX with a valid frame after it is damage inside the
  log (a zeroed page or sector); a longer run is taken as the end, so that a clean end
  costs a look at ZERO_RUN_MAX bytes, not at the whole preallocated file;
- no valid frame anywhere after the damaged bytes: a torn tail. The last write did not
  finish and what it held was never durable, so recovery cuts it off without asking
  (`kind` "torn");
- a valid frame after the damaged bytes: frames were written after them, so the damage is
  inside the log (`kind` "mid"). Recovery never cuts this off by itself; it goes to the
  recovery policy (ledger/recovery_audit.py). `resume` is where that next frame starts.
  One exception, in the last file of a WAL group only: a zeroed sector in the damaged
  bytes, and no frame after them that a sync must have covered (an fsync-class record or
  any control frame: only `disk` and `memory` records and their keys follow). That is what
  a machine crash leaves when the kernel wrote back a later page of the unsynced tail but
  not an earlier one, which it may: nothing there was ever synced, so it is a torn tail
  ("torn"), cut as one, and the classes that do not sync lose their tail as promised.
  When the damaged frame's header adds up (its lengths agree and the next frame starts at
  its claimed end) the damage is one frame, and `topic_id` is what its header names;
  otherwise the damaged bytes up to `resume` cannot be attributed (`topic_id` None).

Looking for the next valid frame tries every offset after the damage up to the last
non-zero byte, so it costs in proportion to the damaged bytes only: a real frame follows
damage inside the log within one frame's length, and a torn tail is short.
"""

from __future__ import annotations

from typing import NamedTuple

from topics_actors.storage.frame import (
    FRAME_LEN_MIN, HEADER, HEADER_BYTES, decode_at, encode_frame,
)
from topics_actors.storage.frame_types import FLAG_DURABLE, FrameType
from topics_actors.storage.wal_scan import describe_end, zeros_from

_SEARCH_CHUNK = 1 << 16
ZERO_RUN_MAX = 1 << 20         # zeros inside the log up to this long are damage, not the end
SECTOR_BYTES = 512             # a page never written back leaves at least one zeroed sector
# Frames a writer may leave unsynced: records (and their idempotency keys) of the classes that
# do not sync, unless flagged durable. Any other frame was synced before it counted.
_UNSYNCED_TYPES = frozenset({FrameType.APPEND, FrameType.APPEND_BATCH, FrameType.IDEM_KEY})


class WalDamage(NamedTuple):
    kind: str                  # "torn" (a lost tail) or "mid" (valid frames follow it)
    offset: int                # where the damaged bytes start
    length: int                # damaged bytes: up to `resume`, or to the end of the data
    resume: int | None         # where the next valid frame starts ("mid" only)
    topic_id: int | None       # what the damaged header names, when it adds up
    frame_type: int | None
    reason: str


def damage_at(view, offset: int, end: int, last: bool = False) -> WalDamage | None:
    """The damage at `offset`, where a scan of `view[:end]` stopped; None for a clean end
    (the end of the data, or zeros: the preallocated rest of the file). `last`: the file is
    the last of its group, the only one that may end in an unsynced tail."""
    damage = _damage_at(view, offset, end)
    if last and damage is not None and damage.kind == "mid" and _unsynced_tail(view, damage,
                                                                                end):
        return WalDamage("torn", offset, _data_end(view, offset, end) - offset, None, None,
                         None, f"a lost page in the unsynced tail ({damage.reason}); no "
                         "synced frame follows it")
    return damage


def _damage_at(view, offset: int, end: int) -> WalDamage | None:
    reason = describe_end(view, offset, end)
    if not reason.startswith("torn"):
        if offset >= end or zeros_from(_Window(view, min(end, offset + ZERO_RUN_MAX)),
                                       offset):
            return None
        resume = next_frame(view, offset + 1, end)
        if resume is None:
            return WalDamage("torn", offset, end - offset, None, None, None, reason)
        return WalDamage("mid", offset, resume - offset, resume, None, None,
                         "zeroed bytes inside the log")
    frame_len = int.from_bytes(view[offset:offset + 4], "little")
    if _header_adds_up(view, offset, end, frame_len):
        claimed_end = offset + 4 + frame_len
        if decode_at(view, claimed_end, end) is not None:
            fields = HEADER.unpack_from(view, offset)
            return WalDamage("mid", offset, claimed_end - offset, claimed_end, fields[3],
                             fields[1], reason)
    resume = next_frame(view, offset + 1, end)
    if resume is None:
        return WalDamage("torn", offset, end - offset, None, None, None, reason)
    return WalDamage("mid", offset, resume - offset, resume, None, None, reason)


def _unsynced_tail(view, damage: WalDamage, end: int) -> bool:
    """A zeroed, sector-aligned run in the damaged bytes, and only frames a writer may
    leave unsynced after them (past any further damage) up to the end of the data."""
    first = -(-damage.offset // SECTOR_BYTES) * SECTOR_BYTES
    zeroed = any(not bytes(view[at:at + SECTOR_BYTES]).strip(b"\x00")
                 for at in range(first, damage.resume - SECTOR_BYTES + 1, SECTOR_BYTES))
    if not zeroed:
        return False
    offset = damage.resume
    while offset is not None and offset < end:
        frame = decode_at(view, offset, end)
        if frame is None:
            offset = next_frame(view, offset + 1, end)
            continue
        if frame.type not in _UNSYNCED_TYPES or frame.flags & FLAG_DURABLE:
            return False
        offset += frame.size
    return True


def next_frame(view, start: int, end: int) -> int | None:
    """The first offset from `start` where a valid frame starts, before the last non-zero
    byte of `view[:end]`; None when there is none."""
    data_end = _data_end(view, start, end)
    # A frame starts with its u32 length, which has a non-zero byte: skip runs of zeros.
    start = max(start, _first_non_zero(view, start, data_end) - 3)
    for offset in range(start, data_end):
        if decode_at(view, offset, end) is not None:
            return offset
    return None


def _first_non_zero(view, start: int, end: int) -> int:
    while start < end:
        chunk = bytes(view[start:min(end, start + _SEARCH_CHUNK)])
        rest = chunk.lstrip(b"\x00")
        if rest:
            return start + len(chunk) - len(rest)
        start += len(chunk)
    return end


def _data_end(view, start: int, end: int) -> int:
    """One past the last non-zero byte of view[start:end] (start when all are zero)."""
    stop = end
    while stop > start:
        lo = max(start, stop - _SEARCH_CHUNK)
        chunk = bytes(view[lo:stop]).rstrip(b"\x00")
        if chunk:
            return lo + len(chunk)
        stop = lo
    return start


def _header_adds_up(view, offset: int, end: int, frame_len: int) -> bool:
    if frame_len < FRAME_LEN_MIN or offset + 4 + frame_len > end:
        return False
    if offset + HEADER_BYTES > end:
        return False
    fields = HEADER.unpack_from(view, offset)
    return 42 + fields[6] + fields[7] + fields[8] == frame_len


class _Window:
    """`view[:end]` without a copy, for zeros_from (which takes len() and slices)."""

    def __init__(self, view, end: int):
        self.view, self.end = view, end

    def __len__(self) -> int:
        return self.end

    def __getitem__(self, key: slice):
        return self.view[key.start:min(key.stop, self.end)]


FILLER_MIN = FRAME_LEN_MIN + 4       # the smallest whole frame


def filler(length: int) -> bytes:
    """A valid frame of exactly `length` bytes that means nothing: what a repair writes over
    a damaged frame or a frame it takes out of the log, so the offsets of the rest stay."""
    if length < FILLER_MIN:
        raise ValueError(f"a filler frame needs at least {FILLER_MIN} bytes, not {length}")
    return encode_frame(FrameType.FILLER, data=bytes(length - FILLER_MIN))
