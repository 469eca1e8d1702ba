"""The soak's verdict (tools/soak/growth_verdict.py): the steady window, growth by robust
trends, bytes per retained record.

| id | what |
|---|---|
| SV-1 | the steady window starts once retained data stays within the band of its final level |
| SV-2 | data that never goes flat, or too few samples, has no steady window |
| SV-3 | a steady leak is growth; noise, one spike, and a one-time step are not |
| SV-4 | a leak hidden under noise larger than itself is still found by its trend and thirds |
| SV-5 | bytes per record leave out the idle node and the ephemeral topics' buffers |
| SV-6 | segment files' descriptors are counted apart, bounded by their reader's LRU |
"""

from __future__ import annotations

import os
import random

import pytest

from tools.soak import growth_verdict as verdict
from tools.soak.process_sampler import sample
from tools.soak.soak_run import segment_maps_max
from topics_actors.compactor.segment_ledger import CHECKPOINT_MAPS_MAX
from topics_actors.storage.segment import SEGMENT_MAPS_MAX

pytestmark = pytest.mark.timeout(30)

MIB = 1 << 20


def test_the_steady_window_starts_when_the_data_is_flat():   # SV-1
    retained = [0, 1000, 2000, 3000, 3950, 4010, 3980, 4000, 3990, 4020, 4005]
    assert verdict.steady_start(retained) == 4
    wobbly = [4000 + (90 if i % 2 else -90) for i in range(10)]   # within 3% of 4000
    assert verdict.steady_start([0, 2000] + wobbly) == 2


def test_no_steady_window_without_flat_data():   # SV-2
    assert verdict.steady_start(list(range(0, 10_000, 500))) is None
    assert verdict.steady_start([4000, 4000, 4000]) is None
    assert verdict.steady_start([]) is None


def _series(per_sample, n: int = 60, base: float = 100 * MIB, seed: int = 7):
    rng = random.Random(seed)
    times = [10.0 * i for i in range(n)]
    return times, [base + per_sample(i, rng) for i in range(n)]


@pytest.mark.parametrize("shape,growing", [
    (lambda i, rng: 0.5 * MIB * i, True),                          # a leak: 30 MiB an hour
    (lambda i, rng: rng.uniform(-3, 3) * MIB, False),              # noise
    (lambda i, rng: 80 * MIB if i == 45 else 0, False),            # one checkpoint spike
    (lambda i, rng: 6 * MIB if i >= 30 else 0, False),             # one step, then flat
    (lambda i, rng: -0.5 * MIB * i, False),                        # shrinking
])
def test_growth_is_a_trend_not_a_spike_or_a_step(shape, growing):   # SV-3
    times, values = _series(shape)
    grew = verdict.growth(times, values, verdict.memory_tolerance(values))
    assert grew.growing is growing, grew


def test_a_leak_under_larger_noise_is_found():   # SV-4
    times, values = _series(lambda i, rng: 0.3 * MIB * i + rng.uniform(-8, 8) * MIB, n=120)
    grew = verdict.growth(times, values, verdict.memory_tolerance(values))
    assert grew.growing and 25 * MIB < grew.trend < 45 * MIB


def test_descriptors_growing_by_a_few_are_not_a_leak():
    times = [float(i) for i in range(30)]
    assert not verdict.growth(times, [100 + i % 5 for i in range(30)],
                              verdict.DESCRIPTOR_SLACK).growing
    assert verdict.growth(times, [100 + i for i in range(30)],
                          verdict.DESCRIPTOR_SLACK).growing


def test_bytes_per_record_leave_out_idle_and_ephemeral_buffers():   # SV-5
    assert verdict.bytes_per_record(300 * MIB, 120 * MIB, 100 * MIB, 4_000_000) == \
        pytest.approx(80 * MIB / 4_000_000)
    assert verdict.bytes_per_record(130 * MIB, 120 * MIB, 0, 0) == 10 * MIB


def test_segment_descriptors_are_counted_apart_and_bounded_by_the_lru(tmp_path):   # SV-6
    before = sample(os.getpid())
    handles = [open(tmp_path / name, "w") for name in ("a.data", "a.idx", "b.data", "wal")]
    try:
        during = sample(os.getpid())
    finally:
        for handle in handles:
            handle.close()
    assert during.segment_fds - before.segment_fds == 3
    assert during.fds - before.fds == 1
    # a shard's working set of mapped segments moving is not a leak up to its LRU's bound,
    # two descriptors a segment; past it, and in a process that maps none, it is
    shard = verdict.segment_descriptor_tolerance(segment_maps_max("shard-01"))
    assert shard == verdict.DESCRIPTOR_SLACK + 2 * SEGMENT_MAPS_MAX
    assert verdict.segment_descriptor_tolerance(segment_maps_max("compactor")) == \
        verdict.DESCRIPTOR_SLACK + 2 * CHECKPOINT_MAPS_MAX
    assert segment_maps_max("gateway") == 0
    times = [float(i) for i in range(30)]
    working_set = [20 + (i * 37) % 300 for i in range(30)]
    assert not verdict.growth(times, working_set, shard).growing
    assert verdict.growth(times, [20 + 30 * i for i in range(30)], shard).growing
