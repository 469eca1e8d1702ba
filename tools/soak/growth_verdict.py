"""The soak's verdict from its samples, without processes or sockets (unit-tested alone).

Growth is judged only once the retained data is flat: from the first sample after which
every retained count stays within FLAT_BAND of the level the run ends at (the median of its
last third). Before that, memory rightly grows with the data. The band is wide because the
load's own deletes move the count: a delete below a seq takes a tenth of a cap at once, a
delete by tag a quarter of a topic's tagged records, and the producers take a while to fill
them again.

Over that steady window each series (a process's anonymous memory, PSS, open descriptors or
threads) is judged by two robust measures, so that one spike (a checkpoint's buffers, a
sample taken while the machine was busy) can neither fail nor hide a leak:
- its Theil-Sen trend (the median of the slopes between every pair of samples) times the
  window's length: what the series gained over the window, by its trend;
- the median of the window's last third minus the median of its first third.
A series keeps growing when both exceed its tolerance. Either alone is noise: a step at one
checkpoint raises the medians' difference but not the trend of a long window, and a short
busy stretch tilts the trend but not the thirds' medians.

Tolerances (docs/OPERATIONS.md "Memory" justifies them from measured runs):
- memory: MEMORY_SLACK_BYTES plus MEMORY_SLACK_FRACTION of the series' median. The slack
  is pymalloc's arena size times four: arenas are 1 MiB, and a process's count of them
  moves by a few as its work comes and goes, whatever the data. The fraction covers what a
  process's own buffers swing by with the load; PSS also counts mapped WAL pages, which
  come and go as files are written and absorbed: two WAL files more (pss_tolerance);
- descriptors other than segment files': DESCRIPTOR_SLACK (connections of clients in the
  middle of coming or going); threads: THREAD_SLACK;
- segment files' descriptors: DESCRIPTOR_SLACK plus two per segment its reader may keep
  mapped (segment_descriptor_tolerance). Which segments the readers use moves with the load
  (retention reads each capped topic's oldest segment, a watcher the ones it visits), and
  within its reader's LRU bound that is a working set, not a leak.
"""

from __future__ import annotations

import statistics
from typing import NamedTuple

FLAT_BAND = 0.10
STEADY_SAMPLES_MIN = 5
MEMORY_SLACK_BYTES = 4 << 20
MEMORY_SLACK_FRACTION = 0.03
DESCRIPTOR_SLACK = 16
THREAD_SLACK = 2


class Growth(NamedTuple):
    trend: float        # gain over the window by the Theil-Sen trend (units of the series)
    step: float         # median of the last third minus median of the first third
    tolerance: float

    @property
    def growing(self) -> bool:
        return self.trend > self.tolerance and self.step > self.tolerance


def steady_start(retained: list[int]) -> int | None:
    """Index of the first sample of the steady window: from there on every retained count
    is within FLAT_BAND of the final level. None if fewer than STEADY_SAMPLES_MIN samples
    qualify (the data never went flat)."""
    if len(retained) < STEADY_SAMPLES_MIN:
        return None
    level = statistics.median(retained[-max(1, len(retained) // 3):])
    start = len(retained)
    while start > 0 and abs(retained[start - 1] - level) <= FLAT_BAND * max(level, 1):
        start -= 1
    return start if len(retained) - start >= STEADY_SAMPLES_MIN else None


def theil_sen_slope(times: list[float], values: list[float]) -> float:
    """The median of the slopes between all pairs of samples with distinct times."""
    slopes = [(values[j] - values[i]) / (times[j] - times[i])
              for i in range(len(times)) for j in range(i + 1, len(times))
              if times[j] != times[i]]
    return statistics.median(slopes) if slopes else 0.0


def growth(times: list[float], values: list[float], tolerance: float) -> Growth:
    """How much a series grew over a window (times ascending, at least 3 samples)."""
    third = max(1, len(values) // 3)
    trend = theil_sen_slope(times, values) * (times[-1] - times[0])
    step = statistics.median(values[-third:]) - statistics.median(values[:third])
    return Growth(trend, step, tolerance)


def memory_tolerance(values: list[float]) -> float:
    return MEMORY_SLACK_BYTES + MEMORY_SLACK_FRACTION * statistics.median(values)


def segment_descriptor_tolerance(maps_max: int, per_map: int = 2) -> float:
    """What a process's segment-file descriptors may move by: its reader's bound of mapped
    segments (`maps_max`, 0 for a process that maps none), `per_map` descriptors each."""
    return DESCRIPTOR_SLACK + maps_max * per_map


def pss_tolerance(values: list[float], wal_file_bytes: int) -> float:
    """memory_tolerance plus two WAL files: a shard's (and the compactor's) maps of the WAL
    gain pages as records are written and read, and lose them when a checkpoint lets the
    absorbed files go, a saw-tooth of about that height."""
    return memory_tolerance(values) + 2 * wal_file_bytes


def bytes_per_record(node_bytes: float, idle_bytes: float, excluded_bytes: float,
                     retained: int) -> float:
    """Anonymous memory per retained record above the idle node, leaving out what holds
    the records themselves (ephemeral topics' frames, which live in memory by design)."""
    return (node_bytes - idle_bytes - excluded_bytes) / max(retained, 1)
