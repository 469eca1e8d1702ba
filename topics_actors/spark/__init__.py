"""A PySpark Python Data Source named `topics` (install with the `spark` extra).

    from topics_actors.spark import register
    register(spark)
    spark.read.format("topics").option("url", "tcp://127.0.0.1:4001")
         .option("topics", "orders").load()

Batch and streaming reads from a node, batch reads straight from a data dir's segment files
(`dataDir`), batch and streaming writes with idempotency keys. See docs/SPARK.md.

Modules:
- `arrow_columns.py`: the read schema, in Spark DDL and as the exact Arrow schema
- `batch_reader.py`: batch reads
- `client_cache.py`: one client per process and endpoint, created lazily where it is used
- `offsets.py`: the offsets of a stream (per topic, the next seq)
- `options.py`: the options of the topics data source
- `planning.py`: pure planning: topics and seq ranges into partitions
- `range_reader.py`: reading one planned seq range from a node, page by page
- `segment_files.py`: bulk history straight from a data dir's sealed segment files
- `source.py`: TopicsDataSource, the data source Spark registers
- `stream_reader.py`: the Structured Streaming source
- `writer.py`: batch and streaming writers
"""

from __future__ import annotations

__all__ = ["TopicsDataSource", "register"]


def register(spark) -> None:
    """Register the `topics` format with a SparkSession (needed once per session)."""
    from topics_actors.spark.source import TopicsDataSource
    spark.dataSource.register(TopicsDataSource)


def __getattr__(name: str):
    if name == "TopicsDataSource":      # imported lazily: the pure modules need no pyspark
        from topics_actors.spark.source import TopicsDataSource
        return TopicsDataSource
    raise AttributeError(name)
