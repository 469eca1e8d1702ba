"""Example pipeline: an `orders` topic aggregated per product, into a topic and into Parquet,
in batch and as a stream (docs/SPARK.md).

    topics serve &                                   # a node on tcp://127.0.0.1:4001
    python examples/orders_pipeline.py --seed 10000  # append 10k orders, then run both

batch:  read every order, group by product (orders, units, revenue), write the result to the
        topic `orders-by-product` (idempotent: the write id is pinned, so a re-run of the
        same batch over the same orders adds nothing) and to Parquet (overwrite).
stream: read new orders micro-batch by micro-batch (availableNow, checkpointed), aggregate
        each micro-batch per product and append the increments to the topic
        `orders-by-product-stream` (writeId = checkpoint's batch id, so a replayed batch is
        not written twice) and to Parquet under batch=<id> (overwritten on replay).
"""

from __future__ import annotations

import argparse
import os
import random
import sys

ORDER_SCHEMA = "order_id BIGINT, product STRING, qty INT, price DOUBLE, country STRING"
PRODUCTS = [f"P-{i:03d}" for i in range(20)]


def seed(url: str, count: int, topic: str = "orders") -> None:
    """Append `count` random orders to `topic`."""
    from topics_actors.client import Client
    rng = random.Random(7)
    with Client(url) as client:
        head = client.get_topic(topic)["head_seq"] if _exists(client, topic) else 0
        for start in range(0, count, 5000):
            client.append(topic, [
                {"data": {"order_id": head + i, "product": rng.choice(PRODUCTS),
                          "qty": rng.randint(1, 5), "price": rng.choice([4.5, 9.9, 19.0]),
                          "country": rng.choice(["FR", "DE", "IT"])}, "tag": "order"}
                for i in range(start + 1, min(count, start + 5000) + 1)], return_seqs=False)


def _exists(client, topic: str) -> bool:
    from topics_actors.client import TopicsError
    try:
        client.get_topic(topic)
        return True
    except TopicsError:
        return False


def per_product(orders):
    """orders (the topics schema) -> product, orders, units, revenue."""
    from pyspark.sql import functions as F
    parsed = orders.select(F.from_json("data", ORDER_SCHEMA).alias("o")).select("o.*")
    return (parsed.groupBy("product")
            .agg(F.count("*").alias("orders"), F.sum("qty").alias("units"),
                 F.round(F.sum(F.col("qty") * F.col("price")), 2).alias("revenue")))


def as_records(totals):
    """Aggregates as topic rows: data = the row's JSON, tag = the product."""
    from pyspark.sql import functions as F
    return totals.select(F.to_json(F.struct(*totals.columns)).alias("data"),
                         F.col("product").alias("tag"))


def run_batch(spark, url: str, out_dir: str, source: str = "orders",
              target: str = "orders-by-product"):
    orders = (spark.read.format("topics").option("url", url).option("topics", source)
              .load())
    totals = per_product(orders).orderBy("product").cache()
    pinned = f"{target}-upto-{orders.agg({'seq': 'max'}).first()[0] or 0}"
    (as_records(totals).write.format("topics").option("url", url).option("topic", target)
     .option("writeId", pinned).mode("append").save())
    totals.write.mode("overwrite").parquet(os.path.join(out_dir, "batch"))
    return totals


def run_stream(spark, url: str, out_dir: str, source: str = "orders",
               target: str = "orders-by-product-stream"):
    def each(batch, batch_id: int) -> None:
        totals = per_product(batch).orderBy("product").cache()
        (as_records(totals).write.format("topics").option("url", url)
         .option("topic", target).option("writeId", f"{target}-batch-{batch_id}")
         .mode("append").save())
        totals.write.mode("overwrite").parquet(
            os.path.join(out_dir, "stream", f"batch={batch_id}"))
        totals.unpersist()

    query = (spark.readStream.format("topics").option("url", url).option("topics", source)
             .option("maxRecordsPerTrigger", "50000").load()
             .writeStream.foreachBatch(each)
             .option("checkpointLocation", os.path.join(out_dir, "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return query


def main() -> None:
    parser = argparse.ArgumentParser(description="orders -> per-product totals, on Spark")
    parser.add_argument("--url", default="tcp://127.0.0.1:4001", help="a node's ZeroMQ front")
    parser.add_argument("--seed", type=int, default=0, help="append this many orders first")
    parser.add_argument("--out", default="orders-out", help="Parquet and checkpoint dir")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    sys.path.insert(0, root)
    if args.seed:
        seed(args.url, args.seed)
    from pyspark.sql import SparkSession

    from topics_actors.spark import register
    spark = (SparkSession.builder.master("local[2]").appName("orders-pipeline")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        run_batch(spark, args.url, args.out).show(5)
        query = run_stream(spark, args.url, args.out)
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        print(f"stream: {rows} new orders in {len(query.recentProgress)} micro-batches; "
              f"Parquet under {args.out}/")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
