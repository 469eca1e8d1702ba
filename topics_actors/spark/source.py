"""TopicsDataSource: the `topics` format. Options are parsed here (options.py) into frozen
dataclasses and copied into each reader and writer; nothing else crosses processes."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from topics_actors.spark.arrow_columns import DDL
from topics_actors.spark.batch_reader import TopicsBatchReader, TopicsPushdownBatchReader
from topics_actors.spark.options import reader_options, writer_options
from topics_actors.spark.stream_reader import TopicsStreamReader
from topics_actors.spark.writer import TopicsBatchWriter, TopicsStreamWriter, check_schema


class TopicsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "topics"

    def schema(self) -> str:
        return DDL

    def reader(self, schema: StructType) -> TopicsBatchReader:
        options = reader_options(self.options)
        if options.pushdown:
            return TopicsPushdownBatchReader(options)
        return TopicsBatchReader(options)

    def streamReader(self, schema: StructType) -> TopicsStreamReader:
        return TopicsStreamReader(reader_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> TopicsBatchWriter:
        options = writer_options(self.options, fresh_id=True)
        _append_only(overwrite)
        check_schema(schema, options)
        return TopicsBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TopicsStreamWriter:
        options = writer_options(self.options, fresh_id=False)
        _append_only(overwrite)
        check_schema(schema, options)
        return TopicsStreamWriter(options)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("topics are append-only: use mode('append')")
