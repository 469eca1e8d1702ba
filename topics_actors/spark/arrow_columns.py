"""The read schema, in Spark DDL and as the exact Arrow schema (spec/spark.md 6.2, P6).

A `scan` reply already holds its columns as buffers (packed seqs and timestamps, the data
JSON texts with their offsets), so a page becomes a RecordBatch without one Python object
per record; only tag and node go through lists.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

DDL = "topic STRING NOT NULL, seq BIGINT NOT NULL, ts TIMESTAMP, tag STRING, node STRING, " \
      "data STRING"

TS_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("ts", TS_TYPE),
    pa.field("tag", pa.string()),
    pa.field("node", pa.string()),
    pa.field("data", pa.string()),
])
US_PER_MS = 1000


def batch_from_columns(topic: str, count: int, seqs: bytes, ts_ms: bytes, data: bytes,
                       offsets: bytes, tags: list, nodes: list) -> pa.RecordBatch:
    """A RecordBatch from little-endian int64 seqs and ms timestamps, the concatenated data
    texts and their count + 1 int32 offsets."""
    seq = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(seqs)])
    ms = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(ts_ms)])
    ts = pc.multiply(ms, US_PER_MS).cast(TS_TYPE)
    text = pa.Array.from_buffers(pa.string(), count,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(topic, pa.string()), count), seq, ts,
         pa.array(tags, pa.string()), pa.array(nodes, pa.string()), text],
        schema=ARROW_SCHEMA)


def batch_from_scan(reply: dict) -> pa.RecordBatch:
    return batch_from_columns(reply["topic"], reply["count"], reply["seqs"], reply["ts"],
                              reply["data"], reply["offsets"], reply["tags"], reply["nodes"])
