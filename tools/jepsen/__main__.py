"""Jepsen-grade faults against a replicated cluster (issue 34).

    python -m tools.jepsen --minutes M --seed S --faults all|KIND,KIND [--max-faults N]
        [--topics 3] [--shards 2] [--gap-min-s 1] [--gap-max-s 5] [--heal-timeout-s 60]
        [--data-dir DIR] [--keep]

Runs as root: ZooKeeper, three nodes and this process (the clients) each get a network
namespace on one bridge (tools/testing/net_lab.py); the nodes' data dirs are on LazyFS
(power loss) and, with disk_full, the last node's on a small loop-mounted ext4. Topics
fsync0, disk1, memory2a (replication factor 3, min_isr 2; lab_cluster.topic_names) get
one acks=all writer and one reader each, leader3 (fsync) an acks=leader writer whose
losses are counted. For M minutes (or N faults) it strikes a fault at a time, kinds dealt
from a seeded deck (tools/jepsen/nemesis.py), and waits after each until every ISR is full
and every writer acked again. Then the oracle (tools/jepsen/oracle.py) reads every copy.
The last line is exactly `PASS: <N> acked writes, <F> faults (<kind> <count>, ...), 0
violations` or `FAIL: ...` with the first violation; the exit status is 0 only on PASS.
Everything started is stopped, unmounted and deleted at exit, on Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from tools.jepsen.jepsen_loop import JepsenLoop, last_line
from tools.jepsen.lab_cluster import LabCluster
from tools.jepsen.nemesis import FAULTS
from tools.testing import lazy_fs, net_lab, small_disk
from tools.testing.zookeeper_server import zookeeper_installed

NOT_APPLICABLE = {"clock_jump": "replication decides nothing by the wall clock "
                                "(docs/FAULT_TESTING.md)"}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.jepsen",
                                     description="Jepsen-grade faults against a cluster")
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--faults", default="all",
                        help=f"all, or kinds comma-separated: {', '.join(FAULTS)}")
    parser.add_argument("--max-faults", type=int, default=0,
                        help="stop striking after this many (0: only the time limits)")
    parser.add_argument("--every-node-power-share", type=float, default=0.35,
                        help="the share of power losses that strike every node at once")
    parser.add_argument("--topics", type=int, default=4,
                        help="fsync0, disk1, memory2a (acks=all), leader3 (acks=leader), ...")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--gap-min-s", type=float, default=1.0)
    parser.add_argument("--gap-max-s", type=float, default=5.0)
    parser.add_argument("--heal-timeout-s", type=float, default=60.0)
    parser.add_argument("--data-dir", default=None, help="work in this empty dir (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = parser.parse_args(argv)
    kinds = list(FAULTS) if args.faults == "all" else [
        k.strip() for k in args.faults.split(",") if k.strip()]
    for kind in kinds:
        if kind in NOT_APPLICABLE:
            parser.error(f"{kind} does not apply: {NOT_APPLICABLE[kind]}")
        if kind not in FAULTS:
            parser.error(f"unknown fault kind {kind!r}; known: {', '.join(FAULTS)}")
    if not kinds or args.gap_min_s > args.gap_max_s or args.topics < 1:
        parser.error("no fault kinds, --gap-min-s above --gap-max-s, or no topics")
    args.faults, args.kinds, args.nodes = ",".join(kinds), kinds, 3
    reason = _missing(kinds)
    if reason:
        parser.error(reason)
    return args


def _missing(kinds: list[str]) -> str | None:
    needs = [net_lab.usable()]
    needs.append(None if zookeeper_installed() else "ZooKeeper is not installed")
    if "power_loss" in kinds:
        needs.append(lazy_fs.lazyfs_usable())
    if "disk_full" in kinds:
        needs.append(small_disk.usable())
    return next((reason for reason in needs if reason), None)


def main(argv: list[str]) -> int:
    args = parse(argv)
    out = lambda line: print(line, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = LabCluster(args.nodes, args.shards, args.topics, args.kinds, args.data_dir,
                         args.keep, out)
    cluster.every_node_power_share = args.every_node_power_share
    loop = JepsenLoop(args, cluster, out)
    status = None
    try:
        report = loop.execute()
    except (KeyboardInterrupt, SystemExit) as stop:
        status = 130 if isinstance(stop, KeyboardInterrupt) else stop.code
        loop.report.failures.append(f"interrupted (exit {status})")
        report = loop.unchecked_report()
    except Exception as error:
        out(traceback.format_exc().rstrip())
        loop.report.failures.append(f"aborted: {type(error).__name__}: {error}")
        report = loop.unchecked_report()
    finally:
        _cleanup(cluster, out)
    for line in report.final_lines()[:-1]:
        out(line)
    out(last_line(loop))
    return status if status is not None else (0 if report.passed else 1)


def _cleanup(cluster: LabCluster, out) -> None:
    previous = {sig: signal.signal(sig, signal.SIG_IGN)
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.close()
        out(f"stopped everything; {'kept' if cluster.keep else 'removed'} {cluster.base}")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
