"""Batch reads: plan seq ranges in the planning worker, read them in the task workers.

`partitions()` asks the node for every topic's bounds once and pins the ranges to the heads
it saw (spec/spark.md 6.4): a DataFrame is a snapshot. With the `dataDir` option the ranges
are pieces of the sealed segment files instead, read without the server. Filter pushdown
(topic =, IN; seq =, <, <=, >, >=) lives in a subclass chosen by the `pushdown` option,
because merely defining pushFilters makes every read fail unless
spark.sql.python.filterPushdown.enabled is true (P3).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader, EqualTo, Filter, GreaterThan, GreaterThanOrEqual, In, InputPartition,
    LessThan, LessThanOrEqual,
)

from topics_actors.client import Client
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.spark.arrow_columns import batch_from_columns
from topics_actors.spark.client_cache import client_for
from topics_actors.spark.offsets import SEQ_MAX
from topics_actors.spark.options import ReaderOptions
from topics_actors.spark.planning import Selection, SeqRange, TopicBounds, plan_batch
from topics_actors.spark.range_reader import read_range
from topics_actors.spark.segment_files import (
    SegmentPiece, group_pieces, plan_pieces, read_piece,
)

log = logging.getLogger(__name__)

_SEQ_OPS = {GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<",
            LessThanOrEqual: "<=", EqualTo: "="}


class RangePartition(InputPartition):
    """One seq range of one topic (picklable: plain values only)."""

    def __init__(self, rng: SeqRange | tuple[SegmentPiece, ...]):
        super().__init__(rng)
        self.rng = rng


def fetch_bounds(client: Client, topics: tuple[str, ...],
                 missing_ok: bool) -> dict[str, TopicBounds]:
    """Each topic's earliest and head seq; a missing topic fails unless missing_ok (then it
    counts as empty)."""
    bounds = {}
    for topic in topics:
        try:
            state = client.get_topic(topic, touch=False)
        except TopicsError as error:
            if error.code is not ErrorCode.TOPIC_NOT_FOUND or not missing_ok:
                raise
            state = {"earliest_seq": 1, "head_seq": 0}
        if state["head_seq"] > SEQ_MAX:
            raise ValueError(f"topic {topic!r}: seq {state['head_seq']} does not fit BIGINT")
        bounds[topic] = TopicBounds(state["earliest_seq"], state["head_seq"])
    return bounds


def read_partition(options: ReaderOptions, rng: SeqRange | tuple[SegmentPiece, ...]
                   ) -> Iterator[pa.RecordBatch]:
    if isinstance(rng, tuple):            # consecutive segment pieces of one topic
        for piece in rng:
            for seqs, ts, data, offsets, tags, nodes in read_piece(
                    piece, options.data_dir, options.cold_dir, chunk_seqs=options.page_size):
                yield batch_from_columns(piece.topic, len(tags), seqs.tobytes(), ts.tobytes(),
                                         data, offsets.tobytes(), tags, nodes)
        return
    client = client_for(options.url, options.request_timeout_ms)
    yield from read_range(client, rng, options.page_size, options.fail_on_data_loss)


class TopicsBatchReader(DataSourceReader):
    def __init__(self, options: ReaderOptions):
        self.options = options
        self.selection = Selection()

    def partitions(self) -> list[RangePartition]:
        o = self.options
        if o.data_dir:
            topics = o.topics if self.selection.topics is None else [
                t for t in o.topics if t in self.selection.topics]
            pieces = plan_pieces(o.data_dir, topics, o.starting, o.ending,
                                 o.seqs_per_partition, self.selection.window)
            return [RangePartition(group)
                    for group in group_pieces(pieces, o.seqs_per_partition)]
        bounds = fetch_bounds(client_for(o.url, o.request_timeout_ms), o.topics, False)
        ranges = plan_batch(bounds, o.starting, o.ending, o.seqs_per_partition,
                            self.selection)
        log.info("event=batch_planned topics=%d partitions=%d", len(bounds), len(ranges))
        return [RangePartition(rng) for rng in ranges]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:      # Spark's stand-in for an empty plan
            return iter(())
        return read_partition(self.options, partition.rng)


def _column(attribute) -> str | None:
    return attribute[0] if len(attribute) == 1 else None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def select(selection: Selection, f: Filter) -> Selection | None:
    """The selection narrowed by filter `f`, or None when `f` is not ours to apply."""
    column = _column(f.attribute)
    if column == "topic" and isinstance(f, EqualTo) and isinstance(f.value, str):
        return selection.only([f.value])
    if column == "topic" and isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return selection.only(f.value)
    if column == "seq" and type(f) in _SEQ_OPS and _is_int(f.value):
        return selection.seqs(_SEQ_OPS[type(f)], f.value)
    return None


class TopicsPushdownBatchReader(TopicsBatchReader):
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Consume topic and seq filters: the planned ranges hold exactly the rows they
        accept, so Spark need not evaluate them again. Yield the rest."""
        for f in filters:
            narrowed = select(self.selection, f)
            if narrowed is None:
                yield f
            else:
                self.selection = narrowed
