"""Appends through the front (a client that does not route) against appends routed straight
to the shards, side by side on one node.

    python tools/bench/front_bench.py [--runs N] [--seconds S] [--shards K] [--window W]

Run it from the repository's root: the node is this tree's code (tools/testing's Node).

One AsyncClient per mode keeps `--window` single-record appends in flight on `memory`
topics (no fsync, so the extra hop is what shows). Each run measures both modes, in
alternating order; the report gives each mode's median appends/s with min-max, the
median of the per-run ratios forwarded / routed, and the supervisor's CPU time per append
in each mode (the relay thread's cost, as the process's user + system time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(os.path.dirname(HERE))]   # siblings, the repository

from bench_stats import fmt_rate, fmt_spread, paired_ratios, spread  # noqa: E402

from tools.testing.node_harness import Node  # noqa: E402  (this tree's code, own group)
from topics_actors.client import AsyncClient  # noqa: E402

TOPICS = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0, help="measured window per mode")
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--window", type=int, default=64, help="appends in flight")
    return p.parse_args(argv)


async def measure(endpoint: str, route: bool, seconds: float,
                  window: int) -> tuple[float, int]:
    """(appends per second with `window` in flight for `seconds` after a short warm-up,
    every append made, warm-up included)."""
    async with AsyncClient(endpoint, route=route, max_in_flight=window) as client:
        names = [f"bench-{i}" for i in range(TOPICS)]
        for name in names:
            await client.put_topic(name, durability="memory")
        done = total = 0
        warm_end = time.monotonic() + 0.3
        end = warm_end + seconds

        async def producer(index: int) -> None:
            nonlocal done, total
            name = names[index % TOPICS]
            while time.monotonic() < end:
                await client.append(name, [{"data": index}], return_seqs=False)
                total += 1
                if time.monotonic() >= warm_end:
                    done += 1
        await asyncio.gather(*(producer(i) for i in range(window)))
        return done / seconds, total


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    routed, forwarded = [], []
    cpu_us = {True: [], False: []}     # supervisor CPU per append, by mode
    base = tempfile.mkdtemp(prefix="topics-front-bench-")
    try:
        with Node(os.path.join(base, "data"), args.shards,
                  log_path=os.path.join(base, "node.log")) as node:
            supervisor = psutil.Process(node.proc.pid)
            for run in range(args.runs):
                order = (True, False) if run % 2 == 0 else (False, True)
                for route in order:
                    before = cpu_s(supervisor)
                    rate, total = asyncio.run(measure(node.endpoint, route, args.seconds,
                                                      args.window))
                    cpu_us[route].append((cpu_s(supervisor) - before) / total * 1e6)
                    (routed if route else forwarded).append(rate)
                    print(f"run {run + 1} {'routed' if route else 'forwarded'}: "
                          f"{fmt_rate(rate)} appends/s", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ratios = spread(paired_ratios(forwarded, routed))
    print(f"\n| mode | appends/s, median (min-max) of {args.runs} runs |\n|---|---|")
    print(f"| routed to the shards | {fmt_spread(spread(routed))} |")
    print(f"| forwarded by the front | {fmt_spread(spread(forwarded))} |")
    print(f"\nforwarded / routed, median of per-run ratios: {ratios['median']:.2f} "
          f"(min {ratios['min']:.2f}, max {ratios['max']:.2f})")
    for route, label in ((False, "forwarded"), (True, "routed")):
        print(f"supervisor CPU per append, {label}: "
              f"{spread(cpu_us[route])['median']:.1f} µs (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
