"""The shards' SegmentReader: what it keeps mapped, and for how long (a map holds a
descriptor)."""

from __future__ import annotations

import os

import pytest

from tests.unit.test_segment import expected, topic_dir, wal_record, write_segment  # noqa: F401
from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.storage import segment as seg
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import SegmentReader

pytestmark = pytest.mark.timeout(60)


def test_reader_sweep_unmaps_idle_segments_and_gives_back_their_descriptors(topic_dir):
    """A segment not read between two idle sweeps goes, its descriptors with it: a shard
    whose watchers wander over its topics kept every segment they had read mapped, two
    descriptors each, up to 256 segments; keep_only drops the segments no topic lists."""
    firsts = [1, 11, 21, 31]
    for first in firsts:
        write_segment(topic_dir, first, 3).close()
    every = {(topic_dir, first) for first in firsts}
    reader = SegmentReader(RealFs())
    fds = lambda: len(os.listdir("/proc/self/fd"))   # noqa: E731
    step, now = seg.IDLE_SWEEP_NS, seg.IDLE_SWEEP_NS
    try:
        before = fds()
        for first in firsts:
            reader.read(topic_dir, first, first)
        assert fds() == before + 2 * len(firsts)     # a map holds its file's descriptor
        assert reader.sweep_idle(now)                # all read since the last sweep: kept
        reader.keep_only(every)
        assert set(reader._views) == every
        reader.read(topic_dir, 11, 12)
        reader.read(topic_dir, 21, 22)
        assert not reader.sweep_idle(now + step - 1)  # not due yet: nothing goes
        assert set(reader._views) == every
        assert reader.sweep_idle(now + step)
        assert set(reader._views) == {(topic_dir, 11), (topic_dir, 21)}
        assert fds() == before + 4
        reader.keep_only({(topic_dir, 11)})          # 21 no longer listed
        assert list(reader._views) == [(topic_dir, 11)]
        reader.sweep_idle(now + 2 * step)            # idle for a whole sweep: gone
        assert reader._views == {} and fds() == before
        assert reader.read(topic_dir, 21, 23) == expected(23, *wal_record(23))
    finally:
        reader.close()
    assert fds() == before


def test_the_compactor_sweeps_its_maps_too(tmp_path, topic_dir):
    """The compactor's reader (its cuts and deletes read segments) held up to 64 maps, a
    dropped segment's among them, until evicted: its checkpointer sweeps them the same way."""
    write_segment(topic_dir, 1, 3).close()
    checkpointer = Checkpointer(RealFs(), str(tmp_path), SegmentLimits())
    reader, step = checkpointer.ledger.reader, seg.IDLE_SWEEP_NS
    try:
        assert reader.read(topic_dir, 1, 2) == expected(2, *wal_record(2))
        checkpointer.sweep_idle_maps(step)
        assert list(reader._views) == [(topic_dir, 1)]
        checkpointer.sweep_idle_maps(2 * step)
        assert reader._views == {}
    finally:
        checkpointer.close()


def test_the_reader_keeps_at_most_its_bound_mapped(topic_dir):
    """The bound the soak's descriptor tolerance rests on: however many segments are read
    between two sweeps, at most max_open stay mapped, two descriptors each."""
    firsts = [1 + 10 * i for i in range(6)]
    for first in firsts:
        write_segment(topic_dir, first, 3).close()
    reader = SegmentReader(RealFs(), max_open=4)
    fds = lambda: len(os.listdir("/proc/self/fd"))   # noqa: E731
    try:
        before = fds()
        for first in firsts + firsts:
            assert reader.read(topic_dir, first, first + 1) == expected(first + 1,
                                                                       *wal_record(first + 1))
            assert len(reader._views) <= 4 and fds() <= before + 2 * 4
        assert list(reader._views) == [(topic_dir, first) for first in firsts[-4:]]
    finally:
        reader.close()
    assert fds() == before
    assert seg.SEGMENT_MAPS_MAX == SegmentReader(RealFs()).max_open
