"""Where a WAL file's log ends (storage/wal_damage.py), on bytes built in memory: a clean end,
a torn tail (no valid frame after the damage) and damage inside the log (one follows), with
and without a header that adds up; and the filler frame a repair writes."""

from __future__ import annotations

import pytest

from topics_actors.storage.frame import decode_at, encode
from topics_actors.storage.frame_types import FLAG_DURABLE, FrameType
from topics_actors.storage.wal_damage import (
    FILLER_MIN, ZERO_RUN_MAX, damage_at, filler, next_frame,
)

TID = 0x1234


def log_of(count: int) -> tuple[bytearray, list[int]]:
    buf, offsets = bytearray(), []
    for seq in range(1, count + 1):
        offsets.append(len(buf))
        encode(buf, FrameType.APPEND, 0, TID, seq, 7, b'{"d":%d}' % seq)
    return buf, offsets


def test_a_clean_end_is_no_damage():
    buf, _ = log_of(3)
    assert damage_at(bytes(buf), len(buf), len(buf)) is None
    padded = bytes(buf) + bytes(8192)
    assert damage_at(padded, len(buf), len(padded)) is None


@pytest.mark.parametrize("tail", [b"\xff" * 100, b"\x30\x00\x00\x00garbage",
                                  b"\x00\x00\x00\x00\x07"])
def test_garbage_without_a_frame_after_it_is_a_torn_tail(tail):
    buf, _ = log_of(3)
    data = bytes(buf) + tail + bytes(4096)
    found = damage_at(data, len(buf), len(data))
    assert found.kind == "torn" and found.resume is None


def test_a_bad_checksum_with_frames_after_it_is_damage_inside_the_log():
    buf, offsets = log_of(5)
    buf[offsets[2] + 40] ^= 0xFF                     # a data byte of seq 3
    assert decode_at(buf, offsets[2], len(buf)) is None
    found = damage_at(bytes(buf), offsets[2], len(buf))
    assert (found.kind, found.resume, found.topic_id) == ("mid", offsets[3], TID)
    assert found.frame_type == FrameType.APPEND and found.length == offsets[3] - offsets[2]


def test_the_last_frames_bad_checksum_is_a_torn_tail():
    buf, offsets = log_of(5)
    buf[-1] ^= 0xFF
    found = damage_at(bytes(buf) + bytes(100), offsets[4], len(buf) + 100)
    assert found.kind == "torn"


def test_a_damaged_length_is_resynced_at_the_next_valid_frame_without_a_name():
    buf, offsets = log_of(5)
    buf[offsets[1]:offsets[1] + 4] = (7).to_bytes(4, "little")
    found = damage_at(bytes(buf), offsets[1], len(buf))
    assert (found.kind, found.resume, found.topic_id) == ("mid", offsets[2], None)


def test_a_zeroed_page_inside_the_log_is_damage_not_the_end():
    buf, offsets = log_of(200)
    start = offsets[5]
    buf[start:start + 4096] = bytes(4096)
    found = damage_at(bytes(buf), start, len(buf))
    assert found.kind == "mid" and found.topic_id is None
    assert found.resume in offsets and found.resume >= start + 4096 - 64


def test_next_frame_skips_nothing_valid_and_stops_at_the_data_end():
    buf, offsets = log_of(3)
    assert next_frame(bytes(buf), 1, len(buf)) == offsets[1]
    assert next_frame(bytes(buf) + bytes(64), offsets[2] + 1, len(buf) + 64) is None


def test_filler_is_a_valid_frame_of_exactly_the_length():
    for length in (FILLER_MIN, 100, 4096):
        frame = decode_at(filler(length), 0, length)
        assert frame is not None and frame.size == length and frame.type == FrameType.FILLER
    with pytest.raises(ValueError):
        filler(FILLER_MIN - 1)


def test_a_zero_run_longer_than_the_limit_is_the_end():
    buf, offsets = log_of(3)
    data = bytes(buf[:offsets[1]]) + bytes(ZERO_RUN_MAX + 10) + bytes(buf[offsets[1]:])
    assert damage_at(data, offsets[1], len(data)) is None
    short = bytes(buf[:offsets[1]]) + bytes(ZERO_RUN_MAX - 10) + bytes(buf[offsets[1]:])
    found = damage_at(short, offsets[1], len(short))
    assert (found.kind, found.resume) == ("mid", offsets[1] + ZERO_RUN_MAX - 10)


# --- a machine crash that wrote back a later page of the unsynced tail (issue 34) --------

def unsynced_log(count: int, durable_at: int | None = None,
                 kind: FrameType = FrameType.APPEND) -> tuple[bytearray, list[int]]:
    """`count` non-durable records, one of them (`durable_at`) of type `kind` and flagged
    durable when `kind` is an Append."""
    buf, offsets = bytearray(), []
    for seq in range(1, count + 1):
        offsets.append(len(buf))
        if seq == durable_at:
            flags = FLAG_DURABLE if kind == FrameType.APPEND else 0
            encode(buf, kind, flags, TID, seq, 7, b'{"d":%d}' % seq if kind ==
                   FrameType.APPEND else (seq + 256).to_bytes(8, "little"))
        else:
            encode(buf, FrameType.APPEND, 0, TID, seq, 7, b'{"d":%d}' % seq)
    return buf, offsets


def zero_page_after(buf: bytearray, offset: int) -> int:
    """Zero the 4 KiB page after the one holding `offset`, as a lost writeback does."""
    page = (offset // 4096 + 1) * 4096
    buf[page:page + 4096] = bytes(4096)
    return page


def first_damage(data: bytes, last: bool):
    offset = 0
    while (frame := decode_at(data, offset, len(data))) is not None:
        offset += frame.size
    return damage_at(data, offset, len(data), last)


def test_a_lost_page_followed_only_by_unsynced_records_is_a_torn_tail_of_the_last_file():
    """LazyFS showed it: power lost, the kernel had written back a later page of the tail
    but not an earlier one. Nothing there was synced: cut it, do not quarantine."""
    buf, offsets = unsynced_log(400)
    page = zero_page_after(buf, offsets[10])
    found = first_damage(bytes(buf), last=True)
    assert found.kind == "torn" and found.offset < page and found.resume is None
    assert "unsynced tail" in found.reason
    assert first_damage(bytes(buf), last=False).kind == "mid"    # an older file was synced


@pytest.mark.parametrize("kind", [FrameType.APPEND, FrameType.HEAD_WATERMARK])
def test_a_lost_page_before_a_synced_frame_is_damage_inside_the_log(kind):
    """An fsync-class record or a control frame after the hole was synced, and so was the
    hole: that is damage, for the recovery policy."""
    buf, offsets = unsynced_log(400, durable_at=380, kind=kind)
    zero_page_after(buf, offsets[10])
    assert first_damage(bytes(buf), last=True).kind == "mid"


def test_a_flipped_byte_before_unsynced_records_stays_damage_inside_the_log():
    """No zeroed sector: not a lost page but damage, even at the end of the last file."""
    buf, offsets = unsynced_log(20)
    buf[offsets[5] + 40] ^= 0xFF
    assert first_damage(bytes(buf), last=True).kind == "mid"
