"""Randomized fault loop over a real cluster (issue 17 item 3).

    python3 -m tools.cluster_crashtest --minutes M [--seed S] [--nodes 3] [--topics 2]
        [--shards 2] [--faults node_kill,shard_kill,...] [--gap-min-s 2] [--gap-max-s 8]
        [--heal-timeout-s 60] [--data-dir DIR] [--keep]

Starts one ZooKeeper and the nodes (2 shards each, session timeout 1 s) in a temp dir,
creates replicated topics (replication factor 3, min_isr 2; fsync, disk, fsync, ...), runs
one acks=all writer per topic, each through another node, and for M minutes strikes one
fault at a time (tools/cluster_crashtest/fault_table.py) at seeded random intervals,
waiting after each until the cluster has healed. At the end: the writers stop, the
followers catch up, the nodes stop, and the oracle runs on every node's copy. One progress
line per fault, then the report. Exit 0 only with verdict PASS: the oracle holds and
nothing failed (a heal timeout is a failure). Everything started is stopped and the temp
dir removed at exit, on Ctrl-C and on errors too (--keep or --data-dir keeps the files).
The seed fixes the faults, victims and intervals; the timing of the processes is not
repeatable.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from tools.cluster_crashtest.cluster_run import ClusterRun
from tools.cluster_crashtest.fault_loop import FaultLoop
from tools.cluster_crashtest.fault_table import FAULTS


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m tools.cluster_crashtest",
                                     description="faults against a three-node cluster")
    parser.add_argument("--minutes", type=float, required=True,
                        help="how long to strike faults (fractions allowed)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="the fault kinds to draw from, comma-separated")
    parser.add_argument("--gap-min-s", type=float, default=2.0,
                        help="the shortest interval between a heal and the next fault")
    parser.add_argument("--gap-max-s", type=float, default=8.0)
    parser.add_argument("--heal-timeout-s", type=float, default=60.0)
    parser.add_argument("--data-dir", default=None, help="work in this empty dir (kept) "
                        "instead of a temp dir")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = parser.parse_args(argv)
    unknown = set(k.strip() for k in args.faults.split(",") if k.strip()) - set(FAULTS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULTS)}")
    if args.nodes < 3:
        parser.error("--nodes must be at least 3 (replication factor 3)")
    if args.data_dir and os.path.isdir(args.data_dir) and os.listdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir} is not empty")
    if args.topics < 1 or args.gap_min_s > args.gap_max_s:
        parser.error("--topics must be positive and --gap-min-s at most --gap-max-s")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    out = lambda line: print(line, flush=True)
    # SIGTERM unwinds like Ctrl-C: everything started is stopped in the finally below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = ClusterRun(args.nodes, args.shards, args.topics, args.data_dir, args.keep, out)
    loop = FaultLoop(args, run, out)
    status = None
    try:
        report = loop.execute()
    except (KeyboardInterrupt, SystemExit) as stop:
        status = 130 if isinstance(stop, KeyboardInterrupt) else stop.code
        what = "Ctrl-C" if status == 130 else "SIGTERM" if status == 143 else "an exit"
        loop.report.failures.append(f"interrupted by {what}")
        report = loop.unchecked_report()
    except Exception as error:
        out(traceback.format_exc().rstrip())
        loop.report.failures.append(f"aborted: {type(error).__name__}: {error}")
        report = loop.unchecked_report()
    finally:
        _cleanup(run, out)
    for line in report.final_lines():
        out(line)
    return status if status is not None else (0 if report.passed else 1)


def _cleanup(run: ClusterRun, out) -> None:
    """With Ctrl-C and SIGTERM ignored, so that a second one cannot cut it short."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        run.close()
        out(f"stopped everything; {'kept' if run.keep else 'removed'} {run.base}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
