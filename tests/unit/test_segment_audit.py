"""The recovery check of one segment (storage/segment_audit.py) on files written by the
segment encoder: faults with their fixes, and the repair that applies them."""

from __future__ import annotations

import os
import pathlib

import pytest

from topics_actors.errors import CorruptionError
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import IDX_ENTRY, encode_record, read_record
from topics_actors.storage.segment_audit import audit, repair

FIRST, COUNT = 10, 6


@pytest.fixture
def segment(tmp_path):
    data, idx = bytearray(), bytearray()
    for i in range(COUNT):
        encode_record(data, idx, 0, 0, FIRST + i, 100 + i, b"", b"t", b'{"d":%d}' % i)
    paths = (os.path.join(tmp_path, "s.data"), os.path.join(tmp_path, "s.idx"))
    for path, raw in zip(paths, (data, idx)):
        with open(path, "wb") as handle:
            handle.write(raw)
    return paths


def load(paths) -> tuple[bytearray, bytearray]:
    return tuple(bytearray(pathlib.Path(p).read_bytes()) for p in paths)


def save(path: str, raw: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(raw)


def entry(idx, seq: int) -> tuple:
    return IDX_ENTRY.unpack_from(idx, (seq - FIRST) * 20)


def test_a_whole_segment_has_no_fault(segment):
    data, idx = load(segment)
    assert audit(data, idx, FIRST, COUNT, len(data)) == []


def test_a_checksum_fault_gets_a_placeholder_and_reads_as_deleted(segment):
    data, idx = load(segment)
    offset, length, _, _ = entry(idx, 12)
    data[offset + length - 12] ^= 0xFF
    save(segment[0], data)
    [fault] = audit(data, idx, FIRST, COUNT, len(data))
    assert (fault.seq, fault.fix, fault.offset, fault.length) == (12, "placeholder", offset,
                                                                  length)
    repair(RealFs(), *segment, FIRST, [fault])
    data, idx = load(segment)
    assert audit(data, idx, FIRST, COUNT, len(data)) == []
    assert read_record(data, idx, FIRST, 12).deleted
    assert read_record(data, idx, FIRST, 13).envelope == b'{"d":3}'


def test_a_wrong_idx_entry_is_rewritten_from_the_data(segment):
    data, idx = load(segment)
    good = bytes(idx)
    offset, length, ts, flags = entry(idx, 11)
    IDX_ENTRY.pack_into(idx, 20, offset + 5000, length, ts, flags)
    save(segment[1], idx)
    [fault] = audit(data, idx, FIRST, COUNT, len(data))
    assert (fault.seq, fault.fix) == (11, "idx")
    repair(RealFs(), *segment, FIRST, [fault])
    assert load(segment)[1] == good


def test_records_past_the_durable_data_are_faults(segment):
    data, idx = load(segment)
    offset, _, _, _ = entry(idx, 14)
    faults = audit(data, idx, FIRST, COUNT, offset)       # .data durable only up to seq 13
    assert [f.seq for f in faults] == [14, 15] and all(f.fix is None for f in faults)


def test_an_unlocatable_record_is_not_repaired(segment):
    data, idx = load(segment)
    offset, length, ts, flags = entry(idx, 12)
    IDX_ENTRY.pack_into(idx, 40, offset + 5000, length, ts, flags)
    data[offset:offset + 4] = (1).to_bytes(4, "little")
    faults = audit(data, idx, FIRST, COUNT, len(data))
    assert faults[0].seq == 12 and faults[0].fix is None
    assert [f.seq for f in faults] == [12, 13, 14, 15]      # the rest cannot be located
    with pytest.raises(CorruptionError):
        repair(RealFs(), *segment, FIRST, faults)
