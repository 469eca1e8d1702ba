"""WAL file scans: stop at the first invalid frame, report valid_len and why."""

from __future__ import annotations

import struct

import pytest

from tools.testing.fault_fs import FaultFs
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_scan import FileScan


def frames(seqs) -> tuple[bytes, list[int]]:
    buf, ends = bytearray(), []
    for seq in seqs:
        encode(buf, FrameType.APPEND, 0, 5, seq, 1000 + seq, b'{"d":%d}' % seq, b"tag")
        ends.append(len(buf))
    return bytes(buf), ends


def scan(tmp_path, content: bytes, fs=None) -> tuple[list[int], FileScan]:
    path = tmp_path / "wal-0000000000000001.log"
    path.write_bytes(content)
    s = FileScan(fs or RealFs(), str(path))
    seqs = [f.seq for f in s.frames()]
    s.close()
    return seqs, s


def test_whole_file_of_frames_ends_at_eof(tmp_path):
    data, ends = frames(range(1, 6))
    seqs, s = scan(tmp_path, data)
    assert seqs == [1, 2, 3, 4, 5]
    assert (s.valid_len, s.size, s.end_reason) == (ends[-1], len(data), "eof")


def test_empty_file(tmp_path):
    seqs, s = scan(tmp_path, b"")
    assert (seqs, s.valid_len, s.end_reason) == ([], 0, "eof")


def test_preallocated_zeros_are_a_clean_end(tmp_path):
    data, ends = frames(range(1, 4))
    seqs, s = scan(tmp_path, data + bytes(64 * 1024))
    assert seqs == [1, 2, 3]
    assert (s.valid_len, s.end_reason) == (ends[-1], "zeros")


def test_all_zero_file(tmp_path):
    seqs, s = scan(tmp_path, bytes(8192))
    assert (seqs, s.valid_len, s.end_reason) == ([], 0, "zeros")


@pytest.mark.parametrize("tail,reason", [
    (b"\x01\x02", "torn: partial length prefix"),
    (struct.pack("<I", 7) + bytes(60), "torn: frame_len 7 below minimum"),
    (struct.pack("<I", 500) + bytes(60), "torn: frame_len 500 overruns the file"),
])
def test_torn_tail_reasons(tmp_path, tail, reason):
    data, ends = frames(range(1, 3))
    seqs, s = scan(tmp_path, data + tail)
    assert seqs == [1, 2]
    assert (s.valid_len, s.end_reason) == (ends[-1], reason)


def test_cut_in_the_middle_of_the_last_frame(tmp_path):
    data, ends = frames(range(1, 4))
    seqs, s = scan(tmp_path, data[:ends[-1] - 5])
    assert seqs == [1, 2] and s.valid_len == ends[1]
    assert s.end_reason.startswith("torn: frame_len") and "overruns" in s.end_reason


def test_section_length_mismatch_is_named(tmp_path):
    data, ends = frames(range(1, 3))
    bad = bytearray(data)
    struct.pack_into("<H", bad, ends[0] + 32, 9)       # tag_len of frame 2
    seqs, s = scan(tmp_path, bytes(bad) + bytes(100))
    assert seqs == [1] and s.valid_len == ends[0]
    assert s.end_reason == "torn: section lengths do not match frame_len"


def test_checksum_flip_in_last_frame(tmp_path):
    data, ends = frames(range(1, 4))
    bad = bytearray(data)
    bad[ends[-1] - 12] ^= 0x40                        # a data byte of frame 3
    seqs, s = scan(tmp_path, bytes(bad) + bytes(100))
    assert seqs == [1, 2] and s.valid_len == ends[1]
    assert s.end_reason.startswith("torn: checksum mismatch")


def test_never_skips_a_corrupt_frame_to_continue(tmp_path):
    """A valid frame after a damaged one is never read (spec 4: never skip-and-continue)."""
    data, ends = frames(range(1, 6))
    bad = bytearray(data)
    bad[ends[1] + 20] ^= 0xFF                         # frame 3 of 5 is damaged
    seqs, s = scan(tmp_path, bytes(bad))
    assert seqs == [1, 2] and s.valid_len == ends[1]
    assert s.end_reason.startswith("torn")


def test_zero_gap_before_valid_frames_is_torn_not_skipped(tmp_path):
    """Zeros followed by data (e.g. a lost page mid-file) end the log and say so."""
    data, ends = frames(range(1, 3))
    later, _ = frames([3])
    seqs, s = scan(tmp_path, data + bytes(512) + later)
    assert seqs == [1, 2] and s.valid_len == ends[-1]
    assert s.end_reason == "torn: zero length before data"


def test_garbage_between_two_valid_runs(tmp_path):
    first, ends = frames([1])
    second, _ = frames([2, 3])
    seqs, s = scan(tmp_path, first + b"\xde\xad\xbe\xef" * 20 + second)
    assert seqs == [1] and s.valid_len == ends[0] and s.end_reason.startswith("torn")


def test_scan_reads_through_the_fs_seam(tmp_path):
    fs = FaultFs()
    data, _ = frames([1])
    seqs, _s = scan(tmp_path, data, fs)
    assert seqs == [1] and fs.count("map_read") == 1
    fs.fail("map_read")
    with pytest.raises(OSError):
        scan(tmp_path, data, fs)
