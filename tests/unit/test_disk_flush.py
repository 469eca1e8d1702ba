"""The disk class's loss window is bounded: the background fdatasync is due once the oldest
unsynced write is older than disk_flush_interval_ms, however busy the shard is."""

import time

from topics_actors.protocol.messages import Append

from topics_actors.config import ShardOptions
from topics_actors.shard.shard_core import ShardCore
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout
from tests.support import wait_for


def make_core(data_dir: str, interval_ms: int, background: bool = False) -> ShardCore:
    prepare_layout(RealFs(), data_dir, 1)
    core = ShardCore(RealFs(), ShardOptions(data_dir, 0, 1, wal_file_bytes=1 << 20,
                                            disk_flush_interval_ms=interval_ms,
                                            background_prealloc=False,
                                            background_flush=background))
    for _ in core.replay().run():
        pass
    return core


def append(core: ShardCore, n: int) -> None:
    core.submit(b"p", n, Append("d", [[b"1"]]), time.perf_counter_ns())
    core.commit()


def test_flush_waits_for_the_interval(tmp_path):
    core = make_core(str(tmp_path), interval_ms=60_000)
    append(core, 1)
    append(core, 2)   # the second append is past the reservation: no forced sync
    assert core.wal.writer.dirty
    assert core.flush_due() is False and core.wal.writer.dirty
    core.close()


def test_busy_shard_still_flushes_the_oldest_unsynced_write(tmp_path):
    core = make_core(str(tmp_path), interval_ms=50)
    append(core, 1)
    append(core, 2)
    syncs = core.wal.writer.syncs
    core.wal.writer.dirty_since_ns -= 60 * 1_000_000   # the oldest unsynced write is 60 ms old
    append(core, 3)                                # a fresh write must not postpone the flush
    assert core.flush_due() is True
    assert not core.wal.writer.dirty and core.wal.writer.syncs == syncs + 1
    core.close()


def test_the_flush_runs_beside_the_loop_and_counts_once_done(tmp_path):
    core = make_core(str(tmp_path), interval_ms=50, background=True)
    append(core, 1)
    append(core, 2)
    writer, syncs = core.wal.writer, core.stats.syncs
    writer.dirty_since_ns -= 60 * 1_000_000
    assert core.flush_due() is True                # started on the helper thread
    wait_for(lambda: (core.flush_due(), not writer.flushing)[1], 10, "the flush")
    assert not writer.dirty and writer.durable_end == (writer.idx, writer.tail)
    assert core.stats.syncs == syncs + 1 and core.ms_until_flush() is None
    core.close()
