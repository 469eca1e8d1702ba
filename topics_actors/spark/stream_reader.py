"""Structured Streaming source: per-topic seq offsets, admission control, AvailableNow.

The methods other than read() run in one long-lived source-runner process per query run;
read() runs in task workers on a different, pickled copy (P7), so everything a task needs
travels in its partition. Offsets are canonical JSON (offsets.py); Spark's checkpoint is
the source of truth, so a restarted query resumes exactly at the last committed offset and
a replayed micro-batch plans the same ranges, hence reads the same records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow,
)

from topics_actors.spark.batch_reader import RangePartition, fetch_bounds, read_partition
from topics_actors.spark.client_cache import client_for
from topics_actors.spark.offsets import decode_offset, encode_offset, resolve
from topics_actors.spark.options import ReaderOptions
from topics_actors.spark.planning import admit, plan_stream

log = logging.getLogger(__name__)


class TopicsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReaderOptions):
        if options.data_dir:
            raise ValueError("option 'dataDir' (segment files) is for batch reads only")
        self.options = options
        self._target: dict[str, int] | None = None      # AvailableNow: heads at the start

    def _client(self):
        return client_for(self.options.url, self.options.request_timeout_ms)

    def _heads(self) -> dict[str, int]:
        bounds = fetch_bounds(self._client(), self.options.topics, missing_ok=True)
        return {t: b.head_seq for t, b in bounds.items()}

    def initialOffset(self) -> dict:
        bounds = fetch_bounds(self._client(), self.options.topics, missing_ok=True)
        start = {t: resolve(self.options.starting, t, b.earliest_seq, b.head_seq, False)
                 for t, b in bounds.items()}
        log.info("event=stream_initial_offset offset=%s", start)
        return encode_offset(start)

    def _start(self, start: dict) -> dict[str, int]:
        """The positions of `start`; a topic it lacks (the topic list changed) starts from
        startingOffsets."""
        positions = decode_offset(start)
        missing = [t for t in self.options.topics if t not in positions]
        if missing:
            initial = decode_offset(self.initialOffset())
            positions.update({t: initial[t] for t in missing})
        return {t: positions[t] for t in self.options.topics}

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._heads()
        log.info("event=stream_available_now target=%s", self._target)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._start(start)
        latest = self._heads()
        if self._target is not None:
            latest = {t: min(latest[t], self._target.get(t, latest[t])) for t in latest}
        if isinstance(limit, ReadMinRows):
            waiting = sum(max(0, latest[t] - begin[t]) for t in latest)
            if waiting < limit.min_rows:
                return encode_offset(begin)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return encode_offset(admit(begin, latest, max_rows))

    def reportLatestOffset(self) -> dict:
        return encode_offset(self._heads())

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        ranges = plan_stream(self._start(start), decode_offset(end),
                             self.options.seqs_per_partition)
        return [RangePartition(rng) for rng in ranges]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition.rng)

    def commit(self, end: dict) -> None:
        """Only a hint: Spark's checkpoint holds the truth; nothing to release here."""
        log.debug("event=stream_commit offset=%s", end)

    def stop(self) -> None:
        log.debug("event=stream_stop")
