"""A PySpark Python Data Source named `topics` (install with the `spark` extra).

    from topics_actors.spark import register
    register(spark)
    spark.read.format("topics").option("url", "tcp://127.0.0.1:4001")
         .option("topics", "orders").load()

Batch and streaming reads from a node, batch reads straight from a data dir's segment files
(`dataDir`), batch and streaming writes with idempotency keys. See docs/SPARK.md.
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
