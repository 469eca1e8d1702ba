"""Snapshot files (spec/storage.md 1.6; invariants 24, 25): the codec, the header checks, loading
the newest valid file, atomic writes under injected faults and failpoints, pruning."""

from __future__ import annotations

import os
import random
import struct

import msgpack
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint
from topics_actors.storage import snapshot as snap
from tools.testing.fault_fs import FaultFs
from topics_actors.storage.fs import RealFs

OLD = {"id": 1, "ts": 1000, "next_topic_id": 3, "checkpoint": {"shards": [[1, 4096]]},
       "topics": [{"name": "orders", "topic_id": 1, "head_seq": 10}]}
NEW = {"id": 2, "ts": 2000, "next_topic_id": 4, "checkpoint": {"shards": [[2, 128], [1, 9]]},
       "topics": [{"name": "orders", "topic_id": 1, "head_seq": 2**64 - 1,
                   "segments": [[1, 4, 152], [5, 2, 80]], "keys": {b"\x00k": 7}}],
       "pad": "x" * 3000}


@pytest.fixture(autouse=True)
def no_failpoints():
    failpoint.disarm()
    try:
        yield
    finally:
        failpoint.disarm()


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def unpack_calls(monkeypatch) -> list:
    """Every msgpack decode the snapshot module makes."""
    calls, real = [], msgpack.unpackb
    monkeypatch.setattr(snap.msgpack, "unpackb",
                        lambda *a, **kw: calls.append(a) or real(*a, **kw))
    return calls


def write_raw(data_dir: str, snap_id: int, raw: bytes, suffix: str = "") -> str:
    os.makedirs(snap.meta_dir(data_dir), exist_ok=True)
    path = snap.snapshot_path(data_dir, snap_id) + suffix
    with open(path, "wb") as handle:
        handle.write(raw)
    return path


def with_header(raw_body: bytes, magic: bytes = snap.MAGIC, version: int = snap.SNAPSHOT_VERSION,
                body_len: int | None = None, checksum: int | None = None) -> bytes:
    return snap.HEADER.pack(magic, version, len(raw_body) if body_len is None else body_len,
                            xxhash.xxh3_64_intdigest(raw_body) if checksum is None else checksum
                            ) + raw_body


def frozen(value):
    """`value` with every list a tuple: arrays may decode as either."""
    if isinstance(value, (list, tuple)):
        return tuple(map(frozen, value))
    if isinstance(value, dict):
        return {frozen(k): frozen(v) for k, v in value.items()}
    return value


def loaded(fs, data_dir: str):
    found = snap.load_newest(fs, data_dir)
    return found and (found[0], frozen(found[1]))


def meta_names(data_dir: str) -> list[str]:
    return sorted(os.listdir(snap.meta_dir(data_dir)))


# --- codec ------------------------------------------------------------------------------------

def test_layout():
    raw = snap.encode_snapshot(NEW)
    body = msgpack.packb(NEW, use_bin_type=True)
    assert snap.HEADER_BYTES == 20 and snap.SNAPSHOT_VERSION == 4
    assert raw[:4] == b"SNP1"
    assert struct.unpack_from("<IIQ", raw, 4) == (4, len(body), xxhash.xxh3_64_intdigest(body))
    assert raw[20:] == body


def test_round_trip_of_a_nested_body():
    body = {"a": {"b": {"c": [1, [2, [3, {"d": b"\x00\xff"}]]]}}, "max": 2**64 - 1,
            "min": -(2**63), "none": None, "flag": True, "f": 1.5, "s": "\u00e9\u65e5",
            7: "int key", 2**64 - 1: [], "empty": {}, "raw": bytes(range(256))}
    assert frozen(snap.decode_snapshot(snap.encode_snapshot(body))) == frozen(body)
    assert snap.decode_snapshot(snap.encode_snapshot({})) == {}
    assert frozen(snap.decode_snapshot(snap.encode_snapshot(NEW))) == frozen(NEW)
    tuple_keys = {"positions": {(1, 4096): "shard-00", (2, 0, (3,)): None}}
    assert frozen(snap.decode_snapshot(snap.encode_snapshot(tuple_keys))) == tuple_keys


KEYS = st.text(max_size=8) | st.integers(-(2**63), 2**64 - 1)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=16)
           | st.binary(max_size=16) | st.floats(allow_nan=False))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(KEYS, inner, max_size=4), max_leaves=24)


@settings(max_examples=100, deadline=None, database=None)
@given(st.dictionaries(KEYS, VALUES, max_size=6))
def test_round_trip(body):
    assert frozen(snap.decode_snapshot(snap.encode_snapshot(body))) == frozen(body)


# --- header checks: the file is skipped and never decoded ---------------------------------------

BODY = msgpack.packb(NEW, use_bin_type=True)
VALID = with_header(BODY)
BAD_HEADERS = {
    "magic SNP2": with_header(BODY, magic=b"SNP2"),
    "magic snp1": with_header(BODY, magic=b"snp1"),
    "magic zeros": with_header(BODY, magic=bytes(4)),
    "version 3": with_header(BODY, version=3),
    "version 5": with_header(BODY, version=5),
    "version 0": with_header(BODY, version=0),
    "version max": with_header(BODY, version=2**32 - 1),
    "body_len +1": with_header(BODY, body_len=len(BODY) + 1),
    "body_len -1": with_header(BODY, body_len=len(BODY) - 1),
    "body_len 0": with_header(BODY, body_len=0),
    "body_len max": with_header(BODY, body_len=2**32 - 1),
    "body_len > BODY_BYTES_MAX": with_header(BODY, body_len=snap.BODY_BYTES_MAX + 1),
    "trailing byte": VALID + b"\x00",
    "body cut": VALID[:-1],
    "no body": VALID[:20],
    "checksum +1": with_header(BODY, checksum=(xxhash.xxh3_64_intdigest(BODY) + 1) % 2**64),
    "checksum zero": with_header(BODY, checksum=0),
}
BAD_HEADERS.update({f"short {n}": VALID[:n] for n in range(20)})
BAD_HEADERS.update({f"checksum byte {i}": VALID[:i] + bytes([VALID[i] ^ 0x10]) + VALID[i + 1:]
                    for i in range(12, 20)})
BAD_HEADERS.update({f"body byte {i}": VALID[:i] + bytes([VALID[i] ^ 0x01]) + VALID[i + 1:]
                    for i in (20, 21, 100, len(VALID) - 1)})


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_bad_header_is_corruption_and_never_decoded(name, unpack_calls):
    with pytest.raises(CorruptionError):
        snap.decode_snapshot(BAD_HEADERS[name])
    assert unpack_calls == []
    assert frozen(snap.decode_snapshot(VALID)) == frozen(NEW) and len(unpack_calls) == 1


@pytest.mark.parametrize("name", ["magic SNP2", "version 3", "version 5", "body_len +1",
                                  "body_len -1", "short 0", "short 19", "checksum byte 12",
                                  "body byte 100", "no body"])
def test_bad_newest_file_falls_back_to_the_previous_one(name, data_dir, unpack_calls):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    write_raw(data_dir, 2, BAD_HEADERS[name])
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))
    assert len(unpack_calls) == 1                    # only the old file's body was decoded


@pytest.mark.parametrize("raw_body", [b"\xc1", b"\x92\x01", b"\x81\x01", b"\x81\xa1a\x01\x02",
                                      msgpack.packb([1, 2]), msgpack.packb(None),
                                      b"\xa2\xff\xfe", b""])
def test_checksum_valid_body_that_is_not_a_map_is_corruption(raw_body, data_dir):
    with pytest.raises(CorruptionError, match="body"):
        snap.decode_snapshot(with_header(raw_body))
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    write_raw(data_dir, 2, with_header(raw_body))
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))


@pytest.mark.parametrize("raw_body", [b"\x81\x80\x01", b"\x81\x91\x80\x01"],
                         ids=["map key", "array key holding a map"])
def test_checksum_valid_body_with_an_unhashable_key_is_corruption(raw_body, data_dir):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    write_raw(data_dir, 2, with_header(raw_body))
    assert loaded(RealFs(), data_dir) == (1, frozen(OLD))
    with pytest.raises(CorruptionError):
        snap.decode_snapshot(with_header(raw_body))


def test_fuzz_header_mutations_are_corruption_or_harmless(unpack_calls):
    rng = random.Random(0x5A9)
    for _ in range(3000):
        raw = bytearray(VALID[:rng.choice((len(VALID), rng.randrange(len(VALID) + 1)))])
        for _ in range(rng.randint(1, 3)):
            if raw:
                raw[rng.randrange(min(len(raw), 24))] = rng.randrange(256)
        try:
            body = snap.decode_snapshot(bytes(raw))
        except CorruptionError:
            continue
        assert bytes(raw) == VALID and frozen(body) == frozen(NEW)
    assert len(unpack_calls) < 3000


# --- load_newest ------------------------------------------------------------------------------

def test_load_newest_picks_the_highest_id(data_dir):
    assert snap.load_newest(RealFs(), data_dir) is None          # no meta/ at all
    os.makedirs(snap.meta_dir(data_dir))
    assert snap.load_newest(RealFs(), data_dir) is None          # empty meta/
    bodies = {snap_id: dict(NEW, id=snap_id) for snap_id in (3, 10, 7, 9)}
    for snap_id, body in bodies.items():
        snap.write_snapshot(RealFs(), data_dir, snap_id, body)
    write_raw(data_dir, 11, b"", suffix=".tmp")
    write_raw(data_dir, 12, b"junk", suffix=".old")
    assert loaded(RealFs(), data_dir) == frozen((10, bodies[10]))
    assert [i for i, _ in snap.list_snapshots(RealFs(), data_dir)] == [10, 9, 7, 3]
    assert snap.snapshot_path(data_dir, 10) == os.path.join(
        data_dir, "meta", "snapshot-0000000000000010.bin")


@pytest.mark.parametrize("keep", [0, 1, 19, 20, 21, 100, -1])
def test_torn_newest_falls_back(data_dir, keep):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    path = snap.write_snapshot(RealFs(), data_dir, 2, NEW)
    os.truncate(path, keep if keep >= 0 else os.path.getsize(path) - 1)
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))


def test_checksum_bad_newest_falls_back_through_several(data_dir):
    for snap_id in (1, 2, 3):
        snap.write_snapshot(RealFs(), data_dir, snap_id, dict(OLD, id=snap_id))
    for snap_id in (2, 3):
        path = snap.snapshot_path(data_dir, snap_id)
        with open(path, "r+b") as handle:
            handle.seek(30)
            byte = handle.read(1)
            handle.seek(30)
            handle.write(bytes([byte[0] ^ 0x01]))
    assert loaded(RealFs(), data_dir) == frozen((1, dict(OLD, id=1)))
    os.truncate(snap.snapshot_path(data_dir, 1), 5)
    assert snap.load_newest(RealFs(), data_dir) is None


def test_tmp_files_are_never_loaded(data_dir):
    write_raw(data_dir, 5, snap.encode_snapshot(NEW), suffix=".tmp")
    assert snap.load_newest(RealFs(), data_dir) is None
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))


def test_an_io_error_while_reading_is_explicit_and_a_retry_converges(data_dir):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    snap.write_snapshot(RealFs(), data_dir, 2, NEW)
    fs = FaultFs()
    fs.fail("read_at")
    with pytest.raises(OSError):                     # not a silent fall back to id 1
        snap.load_newest(fs, data_dir)
    assert loaded(fs, data_dir) == frozen((2, NEW))


# --- atomic writes ----------------------------------------------------------------------------

WRITE_OPS = ("makedirs", "open", "write_at", "sync_all", "rename", "sync_dir")
BEFORE_RENAME = ("makedirs", "open", "write_at", "sync_all", "rename")


def test_write_snapshot_calls(data_dir):
    fs = FaultFs()
    path = snap.write_snapshot(fs, data_dir, 2, NEW)
    assert path == snap.snapshot_path(data_dir, 2)
    assert meta_names(data_dir) == ["snapshot-0000000000000002.bin"]
    # a fresh data dir: meta/ is created, so the data dir is fsynced too
    assert {op: fs.count(op) for op in WRITE_OPS} == dict.fromkeys(WRITE_OPS, 1) | {
        "sync_dir": 2}
    assert fs.count("sync_data") == 0                 # the tmp gets a full fsync
    assert loaded(fs, data_dir) == frozen((2, NEW))


def fault_cases():
    for op in WRITE_OPS:
        kinds = ("eio", "enospc", "short") if op == "write_at" else ("eio", "enospc")
        for kind in kinds:
            for always in (False, True):
                for at in (0, 1):
                    yield op, kind, always, at


@pytest.mark.parametrize("op,kind,always,at", list(fault_cases()))
def test_write_is_atomic_under_every_fault(tmp_path, op, kind, always, at):
    data_dir = str(tmp_path / "data")
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    fs = FaultFs()
    fs.fail(op, at=at, kind=kind, always=always)
    try:
        snap.write_snapshot(fs, data_dir, 2, NEW)
        raised = False
    except OSError:
        raised = True
    got = loaded(RealFs(), data_dir)
    assert got in frozen(((1, OLD), (2, NEW)))
    bins = [n for n in meta_names(data_dir) if n.endswith(".bin")]
    assert bins in (["snapshot-0000000000000001.bin"],
                    ["snapshot-0000000000000001.bin", "snapshot-0000000000000002.bin"])
    if not raised:                                   # returned: the new one is durable
        # meta/ exists already, so makedirs is never called and cannot fail
        assert got == frozen((2, NEW)) and (at > 0 or op == "makedirs"
                                            or kind == "short" and not always)
    elif op in BEFORE_RENAME:
        assert got == frozen((1, OLD)) and fs.count("rename") <= (op == "rename")
    else:
        assert got == frozen((2, NEW))               # renamed; only meta/ fsync failed
    snap.write_snapshot(RealFs(), data_dir, 2, NEW)  # a retry converges
    assert snap.prune(RealFs(), data_dir, 2) == 1
    assert meta_names(data_dir) == ["snapshot-0000000000000002.bin"]
    assert loaded(RealFs(), data_dir) == frozen((2, NEW))


def test_every_call_of_a_write_may_fail(tmp_path):
    """Sweep: fail call N of each op class for every N the clean write makes."""
    clean = FaultFs()
    snap.write_snapshot(clean, str(tmp_path / "clean"), 2, NEW)
    for op in WRITE_OPS:
        for at in range(clean.count(op) + 1):
            data_dir = str(tmp_path / f"{op}-{at}")
            snap.write_snapshot(RealFs(), data_dir, 1, OLD)
            fs = FaultFs()
            fs.fail(op, at=at)
            try:
                snap.write_snapshot(fs, data_dir, 2, NEW)
                outcome = (2, NEW)
            except OSError:
                outcome = (1, OLD) if op in BEFORE_RENAME else (2, NEW)
            assert loaded(RealFs(), data_dir) == frozen(outcome), (op, at)


def test_failpoint_after_rename(data_dir):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    fs = FaultFs()
    failpoint.arm("snapshot::after_rename=raise")
    with pytest.raises(OSError, match="snapshot::after_rename"):
        snap.write_snapshot(fs, data_dir, 2, NEW)
    failpoint.disarm()
    assert fs.count("rename") == 1 and fs.count("sync_dir") == 0
    assert loaded(RealFs(), data_dir) == frozen((2, NEW))


def test_failpoint_before_rename(data_dir):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    failpoint.arm("snapshot::before_rename=raise")
    with pytest.raises(OSError, match="snapshot::before_rename"):
        snap.write_snapshot(RealFs(), data_dir, 2, NEW)
    failpoint.disarm()
    assert meta_names(data_dir) == ["snapshot-0000000000000001.bin",
                                    "snapshot-0000000000000002.bin.tmp"]
    with open(snap.snapshot_path(data_dir, 2) + ".tmp", "rb") as handle:
        assert handle.read() == snap.encode_snapshot(NEW)      # complete, yet never loaded
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))
    snap.write_snapshot(RealFs(), data_dir, 2, NEW)            # the retry reuses the tmp name
    assert meta_names(data_dir) == ["snapshot-0000000000000001.bin",
                                    "snapshot-0000000000000002.bin"]
    assert loaded(RealFs(), data_dir) == frozen((2, NEW))


def test_a_leftover_longer_tmp_is_truncated(data_dir):
    write_raw(data_dir, 2, b"\xab" * 10000, suffix=".tmp")
    snap.write_snapshot(RealFs(), data_dir, 2, OLD)
    assert loaded(RealFs(), data_dir) == frozen((2, OLD))


# --- prune ------------------------------------------------------------------------------------

def test_prune_removes_only_older_ids_and_tmp_files(data_dir):
    for snap_id in (1, 2, 3, 4, 6):
        snap.write_snapshot(RealFs(), data_dir, snap_id, dict(OLD, id=snap_id))
    write_raw(data_dir, 2, b"x", suffix=".tmp")
    write_raw(data_dir, 7, b"x", suffix=".tmp")
    write_raw(data_dir, 1, b"x", suffix=".old")
    with open(os.path.join(snap.meta_dir(data_dir), "notes.txt"), "w") as handle:
        handle.write("keep me")
    fs = FaultFs()
    assert snap.prune(fs, data_dir, 4) == 5
    assert fs.count("remove") == 5
    assert meta_names(data_dir) == ["notes.txt", "snapshot-0000000000000001.bin.old",
                                    "snapshot-0000000000000004.bin",
                                    "snapshot-0000000000000006.bin"]
    assert loaded(RealFs(), data_dir) == frozen((6, dict(OLD, id=6)))
    assert snap.prune(fs, data_dir, 4) == 0
    assert snap.prune(fs, data_dir, 5) == 1                    # keep_id need not exist
    assert meta_names(data_dir)[-1:] == ["snapshot-0000000000000006.bin"]


def test_prune_failures_leave_the_newest(data_dir):
    for snap_id in (1, 2, 3):
        snap.write_snapshot(RealFs(), data_dir, snap_id, dict(OLD, id=snap_id))
    failpoint.arm("snapshot::before_prune=raise")
    with pytest.raises(OSError):
        snap.prune(RealFs(), data_dir, 3)
    failpoint.disarm()
    assert len(meta_names(data_dir)) == 3
    fs = FaultFs()
    fs.fail("remove", at=1)
    with pytest.raises(OSError):
        snap.prune(fs, data_dir, 3)
    assert meta_names(data_dir) == ["snapshot-0000000000000002.bin",
                                    "snapshot-0000000000000003.bin"]
    assert loaded(RealFs(), data_dir) == frozen((3, dict(OLD, id=3)))
    assert snap.prune(RealFs(), data_dir, 3) == 1


def test_a_stray_name_with_a_trailing_newline_is_ignored(data_dir):
    snap.write_snapshot(RealFs(), data_dir, 1, OLD)
    write_raw(data_dir, 9, b"", suffix="\n")
    assert loaded(RealFs(), data_dir) == frozen((1, OLD))
