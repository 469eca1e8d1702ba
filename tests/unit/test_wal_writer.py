"""WalWriter: preallocated files, rotation (and its retry after a failure), undo of failed
batches, the read-only latch."""

from __future__ import annotations

import os
import random
import threading

import pytest

from topics_actors.errors import ErrorCode, StorageError
from tools.testing.crash_fs import CrashFs
from tools.testing.fault_fs import FaultFs
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_layout import list_wal_files, wal_file_name
from topics_actors.storage.wal_scan import FileScan
from topics_actors.storage.wal_writer import WalWriter

FILE_BYTES = 4096


def batch(first: int, count: int = 1, size: int = 100) -> bytes:
    """`count` Append frames of `size` bytes each, seqs from `first`."""
    buf = bytearray()
    for seq in range(first, first + count):
        encode(buf, FrameType.APPEND, 0, 1, seq, 0, b"x" * (size - 46))
    assert len(buf) == count * size
    return bytes(buf)


def seqs_in(fs, path: str) -> list[int]:
    scan = FileScan(fs, path)
    out = [f.seq for f in scan.frames()]
    scan.close()
    return out


def read(path: str, offset: int = 0, size: int = -1) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


@pytest.fixture
def fs():
    return FaultFs()


@pytest.fixture
def wal_dir(tmp_path):
    path = tmp_path / "shard-00"
    path.mkdir()
    return str(path)


@pytest.fixture
def writer(fs, wal_dir):
    w = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False)
    w.open(0, 0)
    yield w
    if w.handle is not None:
        w.handle.close()


def test_open_creates_a_zeroed_preallocated_file(fs, wal_dir, writer):
    path = os.path.join(wal_dir, wal_file_name(1))
    assert os.listdir(wal_dir) == [wal_file_name(1)]      # the .pre was renamed
    assert read(path) == bytes(FILE_BYTES)
    assert (writer.idx, writer.tail, writer.capacity) == (1, 0, FILE_BYTES)
    assert fs.count("sync_all") == 1 and fs.count("sync_dir") == 1
    assert fs.count("rename") == 1


def test_write_appends_at_the_tail(fs, wal_dir, writer):
    assert writer.write(batch(1, 2)) == (1, 0)
    assert writer.write(batch(3)) == (1, 200)
    assert (writer.tail, writer.dirty, writer.bytes_written) == (300, True, 300)
    assert fs.count("sync_data") == 0                     # the caller decides when to sync
    writer.sync()
    assert (writer.dirty, writer.syncs, fs.count("sync_data")) == (False, 1, 1)
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(1))) == [1, 2, 3]


def test_rotation_when_a_batch_does_not_fit(fs, wal_dir, writer):
    positions = [writer.write(batch(seq, 10)) for seq in range(1, 61, 10)]
    # 4096 bytes hold four 1000-byte batches; the fifth starts file 2
    assert positions == [(1, 0), (1, 1000), (1, 2000), (1, 3000), (2, 0), (2, 1000)]
    files = list_wal_files(fs, wal_dir)
    assert [idx for idx, _ in files] == [1, 2]
    assert seqs_in(fs, files[0][1]) == list(range(1, 41))
    assert seqs_in(fs, files[1][1]) == list(range(41, 61))
    assert fs.count("sync_data") == 1      # the dirty old file is synced before the switch
    assert os.path.getsize(files[1][1]) == FILE_BYTES


def test_many_rotations_keep_increasing_idx(fs, wal_dir, writer):
    for seq in range(1, 201, 10):
        writer.write(batch(seq, 10))
    files = list_wal_files(fs, wal_dir)
    assert [idx for idx, _ in files] == list(range(1, len(files) + 1))
    assert len(files) == 5
    seen = [s for _, path in files for s in seqs_in(fs, path)]
    assert seen == list(range(1, 201))


def test_oversized_batch_in_an_empty_file_extends_it(fs, wal_dir, writer):
    big = batch(1, 50)                          # 5000 bytes > 4096
    assert writer.write(big) == (1, 0)
    assert writer.write(batch(51)) == (2, 0)    # the full file rotates
    files = list_wal_files(fs, wal_dir)
    assert os.path.getsize(files[0][1]) == 5000
    assert seqs_in(fs, files[0][1]) == list(range(1, 51))
    assert seqs_in(fs, files[1][1]) == [51]


def test_oversized_batch_after_data_gets_a_file_of_its_own(fs, wal_dir, writer):
    writer.write(batch(1))
    assert writer.write(batch(2, 90)) == (2, 0)            # 9000 bytes
    files = list_wal_files(fs, wal_dir)
    assert os.path.getsize(files[1][1]) >= 9000
    assert writer.write(batch(92)) == (3, 0)
    assert [seqs_in(fs, p) for _, p in list_wal_files(fs, wal_dir)] == [
        [1], list(range(2, 92)), [92]]


def test_failed_write_is_erased_and_the_tail_rewinds(fs, wal_dir, writer):
    writer.write(batch(1, 2))
    fs.fail("write_at", kind="short")                     # half lands on disk ...
    fs.fail("write_at", at=fs.count("write_at") + 1)      # ... then EIO
    with pytest.raises(OSError):
        writer.write(batch(3, 4))
    path = os.path.join(wal_dir, wal_file_name(1))
    assert writer.tail == 200 and not writer.latched
    assert read(path, 200, 400) == bytes(400)             # the half batch was zeroed
    assert [f[2] for f in fs.fired] == ["short", "eio"]
    assert writer.write(batch(3)) == (1, 200)             # the next batch reuses the space
    assert seqs_in(fs, path) == [1, 2, 3]


def test_enospc_write_is_undone(fs, wal_dir, writer):
    fs.fail("write_at", kind="enospc")
    with pytest.raises(OSError) as info:
        writer.write(batch(1))
    assert info.value.errno == 28
    assert writer.tail == 0 and not writer.latched
    assert writer.write(batch(1)) == (1, 0)


def test_short_writes_are_completed(fs, wal_dir, writer):
    fs.fail("write_at", kind="short")
    fs.fail("write_at", at=fs.count("write_at") + 1, kind="short")
    assert writer.write(batch(1, 3)) == (1, 0)
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(1))) == [1, 2, 3]
    assert writer.tail == 300


def test_failed_fsync_is_undone_by_the_caller(fs, wal_dir, writer):
    writer.write(batch(1))
    writer.sync()
    idx, offset = writer.write(batch(2, 3))
    fs.fail("sync_data")
    with pytest.raises(OSError):
        writer.sync()
    writer.undo(offset, 300)
    path = os.path.join(wal_dir, wal_file_name(1))
    assert writer.tail == 100 and not writer.latched
    assert read(path, 100, 300) == bytes(300)
    assert fs.count("sync_data") == 3            # ok, failed, the undo's own sync
    assert writer.write(batch(2)) == (1, 100)
    assert seqs_in(fs, path) == [1, 2]


def test_failure_during_undo_latches(fs, wal_dir, writer):
    writer.write(batch(1))
    fs.fail("write_at", always=True)              # the batch and its erasure both fail
    with pytest.raises(OSError):
        writer.write(batch(2))
    assert writer.latched and "erase" in writer.latched
    fs.clear()
    with pytest.raises(StorageError):
        writer.write(batch(2))
    assert writer.tail == 100


def test_failed_sync_during_undo_latches(fs, wal_dir, writer):
    _, offset = writer.write(batch(1))
    fs.fail("sync_data", always=True)
    with pytest.raises(OSError):
        writer.sync()
    writer.undo(offset, 100)
    assert writer.latched
    fs.clear()
    with pytest.raises(StorageError):
        writer.write(batch(1))


@pytest.mark.parametrize("op", ["open", "sync_all", "rename", "sync_dir", "write_at"])
def test_a_failed_rotation_refuses_the_write_and_the_next_one_rotates(fs, wal_dir, writer, op):
    """A rotation that fails (a full disk, issue 34) refuses its batch and leaves file 1
    whole and synced; it does not latch: once the fault is gone the next write rotates."""
    for seq in range(1, 41, 10):
        writer.write(batch(seq, 10))              # file 1 is full
    writer.sync()
    fs.fail(op, kind="enospc")
    with pytest.raises(StorageError) as refused:
        writer.write(batch(41, 10))
    assert refused.value.code == ErrorCode.INSUFFICIENT_STORAGE
    assert not writer.latched and writer.rotation_error and writer.idx == 1
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(1))) == list(range(1, 41))
    pres = [n for n in os.listdir(wal_dir) if n.endswith(".pre")]      # none half-made
    assert all(os.path.getsize(os.path.join(wal_dir, n)) == FILE_BYTES for n in pres)
    fs.clear()
    assert writer.write(batch(41)) == (2, 0)
    assert writer.rotation_error is None
    writer.sync()
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(2))) == [41]


def test_a_failed_rotation_other_than_a_full_disk_answers_internal(fs, writer):
    for seq in range(1, 41, 10):
        writer.write(batch(seq, 10))
    fs.fail("open")
    with pytest.raises(StorageError) as refused:
        writer.write(batch(41, 10))
    assert refused.value.code == ErrorCode.INTERNAL


def test_resume_at_a_recovered_position(fs, wal_dir, writer):
    writer.write(batch(1, 3))
    writer.close()
    resumed = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False)
    open(os.path.join(wal_dir, wal_file_name(2) + ".pre"), "wb").close()   # stale
    resumed.open(1, 300)
    assert (resumed.idx, resumed.tail) == (1, 300)
    assert not any(n.endswith(".pre") for n in os.listdir(wal_dir))
    assert resumed.write(batch(4)) == (1, 300)
    resumed.close()
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(1))) == [1, 2, 3, 4]


def test_close_syncs_only_when_dirty(fs, wal_dir, writer):
    writer.write(batch(1))
    before = fs.count("sync_data")
    writer.close()
    assert fs.count("sync_data") == before + 1
    clean = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False)
    clean.open(1, 100)            # one sync: what a crashed incarnation left unsynced
    clean.close()
    assert fs.count("sync_data") == before + 2


def test_background_preallocation_prepares_the_next_file(fs, wal_dir):
    w = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=True)
    w.open(0, 0)
    for seq in range(1, 51, 10):
        w.write(batch(seq, 10))
    assert w.idx == 2
    w.close()
    names = sorted(os.listdir(wal_dir))
    assert names[:2] == [wal_file_name(1), wal_file_name(2)]
    assert set(names[2:]) <= {wal_file_name(3) + ".pre"}
    assert [s for _, p in list_wal_files(fs, wal_dir) for s in seqs_in(fs, p)] == list(
        range(1, 51))


# --- the disk class's flush on the helper thread ---------------------------------------------

def gated(w: WalWriter, events: list) -> threading.Event:
    """Hold the active file's fdatasync until the returned event is set; note the sync and
    the file's close in `events`."""
    gate, handle = threading.Event(), w.handle
    sync, close = handle.sync_data, handle.close
    handle.sync_data = lambda: (gate.wait(10), sync(), events.append("synced"))
    handle.close = lambda: (events.append("closed"), close())
    return gate


def test_a_background_flush_counts_when_done_and_writes_after_it_stay_dirty(fs, wal_dir):
    w = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False, background_flush=True)
    w.open(0, 0)
    gate = gated(w, [])
    w.write(batch(1))
    assert w.start_flush() and w.flushing and not w.start_flush()   # one at a time
    w.write(batch(2))                            # while the flush runs: the loop goes on
    w.settle_flush(wait=False)
    assert w.flushing and w.durable_end == (1, 0) and w.dirty
    gate.set()
    w.settle_flush(wait=True)
    assert not w.flushing and w.durable_end == (1, 100)
    assert w.dirty and w.dirty_since_ns >= w.flusher.last_started_ns
    w.start_flush()
    w.settle_flush(wait=True)
    assert w.durable_end == (1, 200) and not w.dirty
    w.close()


def test_rotation_waits_for_a_background_flush_of_the_old_file(fs, wal_dir):
    w = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False, background_flush=True)
    w.open(0, 0)
    events: list[str] = []
    gate = gated(w, events)
    w.write(batch(1))
    w.start_flush()
    threading.Timer(0.2, gate.set).start()
    for seq in range(2, 42):                     # into file 2: the old file is closed
        w.write(batch(seq))
    assert w.idx == 2 and events.index("synced") < events.index("closed")
    w.close()
    assert [s for _, p in list_wal_files(fs, wal_dir) for s in seqs_in(fs, p)] == list(
        range(1, 42))


def test_a_failed_background_flush_latches_the_writer(fs, wal_dir):
    w = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False, background_flush=True)
    w.open(0, 0)
    w.write(batch(1))
    fs.fail("sync_data")
    w.start_flush()
    w.settle_flush(wait=True)
    assert w.latched and w.durable_end == (1, 0)
    with pytest.raises(StorageError):
        w.write(batch(2))
    w.close()


# --- the FaultFs seam itself -----------------------------------------------------------------

def test_fault_fs_counts_and_fires_once_or_always(fs, tmp_path):
    path = str(tmp_path / "f")
    handle = fs.open(path, create=True)
    fs.fail("sync_data", at=1)
    handle.sync_data()
    with pytest.raises(OSError) as info:
        handle.sync_data()
    assert info.value.errno == 5
    handle.sync_data()                                   # once: the next call works
    fs.fail("set_len", kind="enospc", always=True)
    for _ in range(3):
        with pytest.raises(OSError) as info:
            handle.set_len(10)
        assert info.value.errno == 28
    assert fs.count("sync_data") == 3 and fs.count("set_len") == 3
    assert fs.fired == [("sync_data", 1, "eio")] + [("set_len", n, "enospc") for n in range(3)]
    assert fs.mutations() == 1 + 3 + 3                  # open, syncs, set_len
    handle.close()
    with pytest.raises(ValueError):
        fs.fail("sync_data", kind="short")


def test_fault_fs_short_write_writes_half(fs, tmp_path):
    handle = fs.open(str(tmp_path / "f"), create=True)
    fs.fail("write_at", kind="short")
    assert handle.write_at(b"abcdef", 0) == 3
    assert read(str(tmp_path / "f")) == b"abc"
    fs.fail("write_at", kind="short", always=True)
    with pytest.raises(OSError):                         # halves down to a zero-byte write
        handle.write_all_at(b"12345678", 0)
    assert read(str(tmp_path / "f")) == b"1234567"         # 4 + 2 + 1 bytes, then nothing
    assert [n for op, n, kind in fs.fired] == [0, 1, 2, 3, 4]
    handle.close()


def test_a_resumed_file_is_synced_before_frames_after_it_can_be(tmp_path, wal_dir):
    """A process crash leaves the last file's unsynced tail in the page cache; the next
    incarnation resumes after it, rotates and syncs the new file. A power loss then must
    not take the old tail while the new file's frames survive (a gap in the log that
    recovery quarantines; tools.jepsen's 30-minute run, issue 34). Method: CrashFs, whose
    pending writes outlive the first writer (dropped without a close, as kill -9 does)."""
    fs = CrashFs(grave=str(tmp_path / "grave"))
    first = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False)
    first.open(0, 0)
    for seq in range(1, 41, 10):
        first.write(batch(seq, 10))                # disk-class batches: written, not synced
    second = WalWriter(fs, wal_dir, FILE_BYTES, background_prealloc=False)
    second.open(1, first.tail)                     # the restart after the crash
    second.write(batch(41, 10))                    # file 1 is full: to file 2
    second.sync()
    assert second.idx == 2
    fs.power_loss("drop", random.Random(34))
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(1))) == list(range(1, 41))
    assert seqs_in(fs, os.path.join(wal_dir, wal_file_name(2))) == list(range(41, 51))
    for writer in (first, second):
        writer.handle.close()
