"""Router forwarding throughput against plain appends, side by side in the same node.

    python tools/bench/router_bench.py [--runs 3] [--records 200000] [--batch 500] [--shards 2]

One run, on a fresh node: (1) plain: append --records records in --batch batches to a topic
with no router, and time it (records/s acknowledged); (2) routed, same shard and across
shards: create a router, append the same load to its source, and time from the first append
until the destination holds every copy (records/s delivered end to end, so it includes the
appends themselves). The report gives the medians over --runs runs (min-max) and the
median of the per-run ratios routed / plain (1.0: forwarding keeps up with the writer).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(os.path.dirname(_HERE))]   # siblings; the repository

from bench_stats import fmt_rate, fmt_spread, paired_ratios, spread  # noqa: E402

from tools.testing.node_harness import Node  # noqa: E402  (runs this tree's code)
from topics_actors.topic_identity import shard_of_name  # noqa: E402

log = logging.getLogger(__name__)
DELIVERY_TIMEOUT_S = 300.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--json", help="also write the raw per-run results here")
    return p.parse_args(argv)


def name_on(shard: int, shards: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(100_000)
                if shard_of_name(f"{prefix}{i}", shards) == shard)


def append_all(client, topic: str, records: int, batch: int) -> None:
    body = [{"data": {"n": n, "pad": "x" * 40}} for n in range(batch)]
    for _ in range(records // batch):
        client.append(topic, body, return_seqs=False)


def plain_rate(client, topic: str, args) -> float:
    client.put_topic(topic)
    t0 = time.perf_counter()
    append_all(client, topic, args.records, args.batch)
    return args.records / (time.perf_counter() - t0)


def routed_rate(client, source: str, dest: str, args) -> float:
    client.put_router(f"{source}>{dest}", source, dest)
    t0 = time.perf_counter()
    append_all(client, source, args.records, args.batch)
    expected = args.records // args.batch * args.batch
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while client.get_topic(dest, touch=False)["head_seq"] < expected:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{dest}: copies missing after {DELIVERY_TIMEOUT_S} s")
        time.sleep(0.005)
    return expected / (time.perf_counter() - t0)


def one_run(args, run: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        node = Node(os.path.join(tmp, "data"), args.shards, {},
                    log_path=os.path.join(tmp, "node.log")).start()
        try:
            return measure(node.client(request_timeout_ms=10_000), args, run)
        finally:
            node.stop()


def measure(c, args, run: int) -> dict:
    shards = args.shards
    return {
        "plain": plain_rate(c, name_on(0, shards, f"plain{run}-"), args),
        "routed_same_shard": routed_rate(c, name_on(0, shards, f"ss{run}-"),
                                         name_on(0, shards, f"sd{run}-"), args),
        "routed_cross_shard": routed_rate(c, name_on(0, shards, f"xs{run}-"),
                                          name_on(1 % shards, shards, f"xd{run}-"), args),
    }


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    runs = [one_run(args, run) for run in range(args.runs)]
    print(f"\nrouter_bench: {args.records} records in batches of {args.batch}, "
          f"{args.shards} shards, {args.runs} runs (median, min-max)\n")
    print("| case | records/s | ratio to plain appends |\n|---|---|---|")
    plain = [r["plain"] for r in runs]
    for case in ("plain", "routed_same_shard", "routed_cross_shard"):
        values = [r[case] for r in runs]
        ratios = spread(paired_ratios(values, plain))
        print(f"| {case} | {fmt_spread(spread(values), fmt_rate)} | "
              f"{ratios['median']:.2f} ({ratios['min']:.2f}-{ratios['max']:.2f}) |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(runs, handle, indent=1)


if __name__ == "__main__":
    main()
