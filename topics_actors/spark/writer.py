"""Batch and streaming writers: DataFrame rows appended with deterministic idempotency keys.

Input columns: `data` (JSON text, required), `tag` and `node` (optional strings), `topic`
(required unless the `topic` option names the one topic every row goes to; the option wins
over the column). Each task groups its rows per topic and appends chunks of `batchSize`
records, each with the key

    batch:  <writeId>:<partition>:<topic>:<chunk>
    stream: <queryId>:<batchId>:<partition>:<topic>:<chunk>

A retried task, a speculative copy, a replayed micro-batch or a whole job re-run with the
same `writeId` produces the same keys for the same rows, and the server answers each repeat
with the original seqs instead of appending again. A failed attempt may have seen its input
end early (Spark then hands the writer a cut-off iterator) and flushed a short last chunk;
its retry finds that key covering only a prefix of the full chunk and appends the rest
under a derived key (_Chunker._append_chunk). This holds while the task's input order is
deterministic and the key is still inside the topic's idempotency window (a topic the
writer creates gets `idempotencyWindowMs`, 7 days by default; the server's default is 2
minutes). `abort()` cannot roll back an append-only log: re-running with the same writeId
completes a failed job without duplicates.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pyarrow as pa
import xxhash
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage,
)
from pyspark.sql.types import StringType, StructType

from topics_actors.spark.client_cache import client_for
from topics_actors.spark.options import OptionError, WriterOptions

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
TOPIC_IN_KEY_MAX = 64         # longer names enter a key as their hash (keys: 256 bytes max)


@dataclasses.dataclass
class AppendReport(WriterCommitMessage):
    partition: int
    attempt: int
    records: int = 0          # rows this attempt handed to the server
    appended: int = 0         # of them, newly appended
    deduped: int = 0          # of them, already there from an earlier attempt
    chunks: int = 0


def check_schema(schema: StructType, options: WriterOptions) -> None:
    """Fail at planning, with the reason, when the DataFrame cannot be written."""
    fields = {f.name: f.dataType for f in schema.fields}
    needed = ["data"] + ([] if options.topic else ["topic"])
    for name in needed:
        if name not in fields:
            hint = " (or set the 'topic' option)" if name == "topic" else ""
            raise OptionError(f"the DataFrame needs a string column {name!r}{hint}; "
                              f"it has {sorted(fields)}")
    for name in ("data", "topic", "tag", "node"):
        if name in fields and not isinstance(fields[name], StringType):
            raise OptionError(f"column {name!r} must be a string (JSON text for 'data', "
                              f"e.g. to_json(...)); it is {fields[name].simpleString()}")


class _Chunker:
    """Per-topic buffers of wire records, appended in chunks with positional keys."""

    def __init__(self, options: WriterOptions, key_prefix: str, report: AppendReport):
        self.options = options
        self.key_prefix = key_prefix
        self.report = report
        self.client = client_for(options.url, options.request_timeout_ms)
        self.buffers: dict[str, list] = {}
        self.chunks: dict[str, int] = {}
        self.config = {"idempotency_window_ms": options.idempotency_window_ms}

    def add_batch(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        data = batch.column(names.index("data")).to_pylist()
        if None in data:
            raise ValueError("column 'data' holds a null: every record needs JSON text")
        tags = _strings(batch, "tag")
        nodes = _strings(batch, "node")
        topics = (None if self.options.topic else
                  batch.column(names.index("topic")).to_pylist())
        for i, text in enumerate(data):
            topic = self.options.topic or topics[i]
            if not topic:
                raise ValueError("a row has no topic (null 'topic' column)")
            buffer = self.buffers.setdefault(topic, [])
            buffer.append([text.encode(), tags[i], nodes[i]])
            if len(buffer) >= self.options.batch_size:
                self.flush(topic)

    def flush(self, topic: str) -> None:
        records = self.buffers.pop(topic, None)
        if not records:
            return
        chunk = self.chunks.get(topic, 0)
        self.chunks[topic] = chunk + 1
        name = topic if len(topic) <= TOPIC_IN_KEY_MAX else xxhash.xxh3_64_hexdigest(topic)
        self._append_chunk(topic, records, f"{self.key_prefix}:{name}:{chunk}")
        self.report.records += len(records)
        self.report.chunks += 1

    def _append_chunk(self, topic: str, records: list, key: str) -> None:
        """Append a chunk under `key`. A key already used for only a prefix of the chunk
        (an earlier attempt flushed a short last chunk when its input was cut off) gets the
        rest appended under `<key>+<prefix length>`, so neither a row is lost nor one
        written twice."""
        done = 0
        while done < len(records):
            part = records[done:]
            reply = self.client.append_encoded(
                topic, part, idempotency_key=key if not done else f"{key}+{done}",
                create=True, config=self.config)
            if not reply.get("deduped"):
                self.report.appended += len(part)
                return
            if reply["count"] > len(part):
                raise RuntimeError(
                    f"idempotency key {key!r} was used for {reply['count']} records, now for "
                    f"{len(part)}: this task's input order is not deterministic (sort it, "
                    f"or write with a fresh writeId)")
            self.report.deduped += reply["count"]
            done += reply["count"]

    def finish(self) -> AppendReport:
        for topic in list(self.buffers):
            self.flush(topic)
        return self.report


def _strings(batch: pa.RecordBatch, name: str) -> list:
    names = batch.schema.names
    if name not in names:
        return [None] * batch.num_rows
    return batch.column(names.index(name)).to_pylist()


def write_batches(options: WriterOptions, key_prefix: str,
                  batches: Iterator[pa.RecordBatch]) -> AppendReport:
    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    chunker = _Chunker(options, f"{key_prefix}:{partition}",
                       AppendReport(partition, attempt))
    for batch in batches:
        chunker.add_batch(batch)
    report = chunker.finish()
    log.info("event=write_task partition=%d attempt=%d records=%d appended=%d deduped=%d",
             partition, attempt, report.records, report.appended, report.deduped)
    return report


def _totals(messages) -> tuple[int, int, int]:
    done = [m for m in messages if isinstance(m, AppendReport)]
    return (sum(m.appended for m in done), sum(m.deduped for m in done),
            len(messages) - len(done))


class TopicsBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriterOptions):
        self.options = options        # write_id made once at planning: every task shares it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendReport:
        return write_batches(self.options, self.options.write_id, iterator)

    def commit(self, messages) -> None:
        appended, deduped, failed = _totals(messages)
        log.info("event=write_committed write_id=%s appended=%d deduped=%d",
                 self.options.write_id, appended, deduped)

    def abort(self, messages) -> None:
        appended, deduped, failed = _totals(messages)
        log.warning("event=write_aborted write_id=%s appended=%d failed_tasks=%d: re-run "
                    "with option writeId=%s to complete it without duplicates",
                    self.options.write_id, appended, failed, self.options.write_id)


class TopicsStreamWriter(DataSourceStreamArrowWriter):
    """A fresh instance runs every commit (P8): its identity comes from the task's local
    properties, which Spark keeps stable across restarts from the same checkpoint."""

    def __init__(self, options: WriterOptions):
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendReport:
        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise RuntimeError("no streaming query id / batch id in the task context")
        prefix = f"{self.options.write_id}:" if self.options.write_id else ""
        return write_batches(self.options, f"{prefix}{query_id}:{batch_id}", iterator)

    def commit(self, messages, batchId: int) -> None:
        appended, deduped, _ = _totals(messages)
        log.info("event=stream_write_committed batch=%d appended=%d deduped=%d", batchId,
                 appended, deduped)

    def abort(self, messages, batchId: int) -> None:
        appended, _, failed = _totals(messages)
        log.warning("event=stream_write_aborted batch=%d appended=%d failed_tasks=%d; a "
                    "restart from the checkpoint replays it without duplicates", batchId,
                    appended, failed)
