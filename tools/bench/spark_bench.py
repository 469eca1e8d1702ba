"""Spark bench: batch read of 1M records through the `topics` source, beside Spark's own
ceiling for the same schema, and batch write throughput (docs/BENCHMARKS_HISTORY.md, "Spark").

    python tools/bench/spark_bench.py            # --records 1000000 --runs 3

One node (its own process group, temp dir, 2 shards, checkpoints every second so the
segment-file reader has sealed history) and one local[2] SparkSession. Every read is forced
with the `noop` sink, which materialises every column. Cases, each run `--runs` times
(median and min-max reported):

- ceiling: a trivial in-memory Python data source yielding prebuilt Arrow batches of the
  same schema (no I/O: what Spark's Python data source path itself can carry);
- server, 1 topic: all records in one topic (one shard serves them);
- server, 2 topics: the records split over two topics on different shards;
- segment files: the same 1M records from the sealed segment files (`dataDir`), no server;
- write: `--write-records` rows written by the batch writer (batchSize 5000, 4 partitions).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

from node_proc import NodeProcess  # noqa: E402

log = logging.getLogger("spark_bench")

LOAD_BATCH = 10_000


def prepare_env() -> None:
    """Workers and the node must run this checkout's code (spec/spark.md P2)."""
    paths = [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("TOPICS_CHECKPOINT_INTERVAL_MS", "1000")


def load(client, topics: list[str], records: int) -> None:
    """`records` small orders (~100 B of JSON each) spread evenly over `topics`."""
    per_topic = records // len(topics)
    for topic in topics:
        client.put_topic(topic, durability="disk")
        for start in range(0, per_topic, LOAD_BATCH):
            batch = [{"data": {"order": i, "product": f"P-{i % 500:04d}", "qty": i % 7 + 1,
                               "price": round(5 + i % 97 * 0.25, 2), "country": "FR"},
                      "tag": "bench"}
                     for i in range(start, min(per_topic, start + LOAD_BATCH))]
            client.append(topic, batch, return_seqs=False)


def wait_sealed(data_dir: str, wanted: dict[str, int], timeout_s: float = 300) -> None:
    from topics_actors.storage.fs import RealFs
    from topics_actors.storage.snapshot import load_newest
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        loaded = load_newest(RealFs(), data_dir)
        got = {e["name"]: sum(s[1] for s in e["segments"]) for e in loaded[1]["topics"]} \
            if loaded else {}
        if all(got.get(t, 0) >= n for t, n in wanted.items()):
            return
        time.sleep(0.5)
    raise TimeoutError("the records were not sealed into segments in time")


def spark_session():
    from pyspark.sql import SparkSession

    from topics_actors.spark import register
    spark = (SparkSession.builder.master("local[2]").appName("topics-spark-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(ceiling_source())
    return spark


def ceiling_source():
    """A trivial in-memory source with the topics schema: each partition yields one
    prebuilt 10k-row Arrow batch over and over (no I/O, no JSON)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from topics_actors.spark.arrow_columns import ARROW_SCHEMA, DDL

    class CeilingReader(DataSourceReader):
        def __init__(self, records: int, partitions: int):
            self.records, self.count = records, partitions

        def partitions(self):
            return [InputPartition(i) for i in range(self.count)]

        def read(self, partition):
            import pyarrow as pa
            rows = 10_000
            data = [f'{{"order":{i},"product":"P-{i % 500:04d}","qty":3,"price":12.5}}'
                    for i in range(rows)]
            batch = pa.RecordBatch.from_arrays(
                [pa.array(["bench"] * rows), pa.array(range(rows), pa.int64()),
                 pa.array([1_700_000_000_000_000] * rows, pa.int64()).cast(
                     ARROW_SCHEMA.field("ts").type),
                 pa.array(["bench"] * rows), pa.array([None] * rows, pa.string()),
                 pa.array(data)], schema=ARROW_SCHEMA)
            for _ in range(self.records // self.count // rows):
                yield batch

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return "topics_ceiling"

        def schema(self):
            return DDL

        def reader(self, schema):
            return CeilingReader(int(self.options["records"]), int(self.options["partitions"]))

    return CeilingSource


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def read_case(spark, records: int, runs: int, options: dict, fmt: str = "topics") -> list:
    def once():
        reader = spark.read.format(fmt)
        for key, value in options.items():
            reader = reader.option(key, value)
        reader.load().write.format("noop").mode("overwrite").save()
    once()                                           # warm-up: workers, imports, JIT
    return [records / timed(once) for _ in range(runs)]


def write_case(spark, endpoint: str, rows: int, runs: int) -> list:
    from pyspark.sql import functions as F
    df = spark.range(0, rows, numPartitions=4).select(
        F.to_json(F.struct(F.col("id").alias("order"),
                           F.concat(F.lit("P-"), (F.col("id") % 500).cast("string"))
                           .alias("product"), (F.col("id") % 7 + 1).alias("qty"),
                           F.lit(12.5).alias("price"))).alias("data")).cache()
    df.count()
    rates = []
    for run in range(runs + 1):
        seconds = timed(lambda: df.write.format("topics").option("url", endpoint)
                        .option("topic", f"bench-write-{run}").option("batchSize", "5000")
                        .mode("append").save())
        if run:                                      # run 0 warms the writer path up
            rates.append(rows / seconds)
    return rates


def row(name: str, rates: list, ceiling: float | None) -> str:
    median = statistics.median(rates)
    share = f"{median / ceiling:.0%}" if ceiling else ""
    return (f"| {name} | {median / 1e3:,.0f}k | {min(rates) / 1e3:,.0f}k–"
            f"{max(rates) / 1e3:,.0f}k | {share} |")


def run(args) -> list[str]:
    with NodeProcess(shards=2) as node:
        one, pair = "bench-one", node.topic_names("bench-pair")
        load(node.client, [one], args.records)
        load(node.client, pair, args.records)
        data_dir = os.path.join(node.tmp, "data")
        wait_sealed(data_dir, {one: args.records})
        spark = spark_session()
        try:
            ceiling = read_case(spark, args.records, args.runs,
                                {"records": str(args.records), "partitions": "8"},
                                fmt="topics_ceiling")
            common = {"url": node.endpoint, "seqsPerPartition": str(args.records // 8)}
            single = read_case(spark, args.records, args.runs, dict(common, topics=one))
            spread = read_case(spark, args.records, args.runs,
                               dict(common, topics=",".join(pair),
                                    seqsPerPartition=str(args.records // 8)))
            files = read_case(spark, args.records, args.runs,
                              {"dataDir": data_dir, "topics": one,
                               "seqsPerPartition": str(args.records // 8)})
            writes = write_case(spark, node.endpoint, args.write_records, args.runs)
        finally:
            spark.stop()
    top = statistics.median(ceiling)
    return ["| case (records/s) | median | min–max | of ceiling |", "|---|---|---|---|",
            row("Spark ceiling: in-memory Python source, Arrow batches", ceiling, top),
            row("topics source, 1 topic (1 shard)", single, top),
            row("topics source, 2 topics (2 shards)", spread, top),
            row("segment files (dataDir), 1 topic", files, top),
            row(f"batch write, {args.write_records:,} rows, 4 partitions", writes, None)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--write-records", type=int, default=250_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    prepare_env()
    began = time.monotonic()
    lines = run(args)
    print("\n".join(lines))
    print(f"\n{args.records:,} records, {args.runs} runs, "
          f"{time.monotonic() - began:.0f} s in all")


if __name__ == "__main__":
    main()
