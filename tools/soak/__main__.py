"""A long run of a busy node that keeps its memory honest (issue 36).

    python -m tools.soak --minutes M [--seed S] [--shards 2] [--topics-per-class 50]
        [--classes fsync,disk,memory,ephemeral] [--cap 20000] [--batch 10] [--producers 8]
        [--watchers 100] [--workers 4] [--routers 2] [--sample-s 10] [--idle-s 5]
        [--bound-bytes 20] [--fast] [--data-dir DIR] [--keep]

Starts a node in a temp dir, samples its processes idle, creates capped topics in every
durability class and queues, and for M minutes runs the mixed load of
tools/soak/load_mix.py (producers, deletes, watchers and /work consumers coming and going,
routers and a topic deleted and created again), sampling each process's anonymous memory,
PSS, open descriptors and threads every --sample-s seconds. One line per sample, then a
table per process and the verdict (tools/soak/growth_verdict.py). The last line is

    PASS: <records> appended, <retained> retained, <bytes> B/record

or `FAIL: <reasons>`: a process whose memory, PSS, descriptors or threads keep growing once
the retained data is flat, anonymous memory per retained record over --bound-bytes (above
the idle node, ephemeral topics' record buffers left out), retained data that never went
flat, a node process restarted, a load error other than the expected ones, or an unclean
stop. Exit status 0 only on PASS. --fast checkpoints every 2 s or 4 MiB (a short run then
sees many). Run it under `nice -n 19` on a shared machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys

from tools.soak.process_sampler import supported
from tools.soak.soak_plan import CLASSES, SoakPlan
from tools.soak.soak_run import SoakRun

_KNOBS = ("seed", "shards", "topics_per_class", "cap", "batch", "producers", "watchers",
          "workers", "routers", "sample_s", "idle_s", "bound_bytes")


def parse(argv: list[str]) -> tuple[SoakPlan, argparse.Namespace]:
    defaults = SoakPlan()
    parser = argparse.ArgumentParser(prog="python -m tools.soak",
                                     description="a long run that checks a node's memory")
    parser.add_argument("--minutes", type=float, required=True)
    for knob in _KNOBS:
        default = getattr(defaults, knob)
        parser.add_argument(f"--{knob.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--fast", action="store_true", help="checkpoints every 2 s or 4 MiB")
    parser.add_argument("--data-dir", default=None, help="work in this dir (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args(argv)
    classes = tuple(c.strip() for c in args.classes.split(",") if c.strip())
    if not classes or set(classes) - set(CLASSES):
        parser.error(f"--classes must name some of {', '.join(CLASSES)}")
    if args.minutes <= 0 or args.cap < 1 or args.topics_per_class < 1:
        parser.error("--minutes, --cap and --topics-per-class must be positive")
    if args.data_dir and os.path.isdir(args.data_dir) and os.listdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir} is not empty")
    plan = dataclasses.replace(defaults, minutes=args.minutes, classes=classes, fast=args.fast,
                               **{knob: getattr(args, knob) for knob in _KNOBS})
    return plan, args


def main(argv: list[str]) -> int:
    if not supported():
        print("FAIL: the soak reads Pss_Anon in /proc/<pid>/smaps_rollup (Linux 5.7 or later)")
        return 1
    # SIGTERM unwinds like Ctrl-C: the node it started is stopped, not left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    plan, args = parse(argv)
    return SoakRun(plan, args.data_dir, args.keep, out=lambda line: print(line, flush=True)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
