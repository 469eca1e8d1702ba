"""Randomized kill-and-verify loop over a real node (issue 6 item 4).

    python -m tools.crashtest [--iterations N] [--duration-s S] [--seed K] [--shards N]
                              [--roles shard,compactor,...] [--data-dir DIR]

Each iteration: the mixed load of tools/testing/client_load.py runs; at a seeded random
instant one process of a seeded random kind (tools/testing/kill_table.py ROLES) gets
SIGKILL; the node must heal (the supervisor restarts the victim; for a killed supervisor a
new one starts at once on the same front port and waits for the old children to exit by
themselves); the load must progress; then it pauses and the oracle checks every topic. One
progress line per iteration; at the end a clean stop, fsck, and a summary: iterations, kills
per kind, acked writes verified, violations. Exit status 1 on any violation. Stops after
--iterations or --duration-s, whichever comes first (0: no limit of that kind).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import sys
import tempfile
import time

from tools.testing.client_load import Load
from tools.testing.kill_table import ROLES
from tools.testing.node_harness import Node, wait_for
from topics_actors import fsck

NODE_ENV = {"TOPICS_CHECKPOINT_INTERVAL_MS": "500", "TOPICS_SEGMENT_MAX_EVENTS": "200",
            "TOPICS_RECLAIM_INTERVAL_MS": "500", "TOPICS_WAL_FILE_BYTES": str(1 << 20),
            "TOPICS_HEARTBEAT_TIMEOUT_MS": "5000"}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.crashtest")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--duration-s", type=float, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--roles", default=",".join(sorted(ROLES)))
    parser.add_argument("--data-dir", default=None)
    return parser.parse_args(argv)


class Loop:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rng = random.Random(args.seed)
        self.base = args.data_dir or tempfile.mkdtemp(prefix="crashtest-")
        os.makedirs(self.base, exist_ok=True)
        self.data_dir = f"{self.base}/data"
        self.roles = [r.strip() for r in args.roles.split(",") if r.strip()]
        self.kills: collections.Counter[str] = collections.Counter()
        self.violations: list[str] = []
        self.verified = 0
        self.node: Node | None = None

    def make_node(self, port: int = 0) -> Node:
        env = dict(NODE_ENV, TOPICS_ZMQ_PORT=str(port)) if port else NODE_ENV
        return Node(self.data_dir, self.args.shards, env,
                    log_path=f"{self.base}/node.log").start(timeout_s=120)

    def iteration(self, n: int, load: Load) -> str:
        role = self.rng.choice(self.roles)
        base = load.acked
        wait_for(lambda: load.acked >= base + 30 or load.errors, 120, "load progress")
        load.stop_event.wait(self.rng.uniform(0.05, 1.0))   # the random instant
        started = time.monotonic()
        self.node, victim = ROLES[role](self.node, self.rng, self.make_node)
        healed_s = time.monotonic() - started
        self.kills[role] += 1
        base = load.acked
        wait_for(lambda: load.acked >= base + 30 or load.errors, 120, "progress after")
        load.stop()
        bad, intact = load.verify(self.node.client(request_timeout_ms=5000))
        load.errors.clear()    # counted once: a kept error would be counted at every verify
        self.violations += [f"iteration {n}: {v}" for v in bad]
        for violation in bad:  # as they happen: the summary shows only the first 50
            print(f"VIOLATION iteration {n}: {violation}", flush=True)
        self.verified += intact
        load.start(self.node)
        return (f"iteration {n}: killed {victim}, healed in {healed_s:.2f}s, acked "
                f"{load.acked}, intact {intact}, violations {len(bad)}")

    def run(self) -> int:
        args, started = self.args, time.monotonic()
        self.node = self.make_node()
        load, n = Load(), 0
        load.start(self.node)
        try:
            while ((not args.iterations or n < args.iterations)
                   and (not args.duration_s or time.monotonic() - started < args.duration_s)):
                n += 1
                try:
                    line = self.iteration(n, load)
                except AssertionError as error:      # a node that did not heal in time
                    self.violations.append(f"iteration {n}: {error}")
                    line = f"iteration {n}: VIOLATION {error}"
                print(line, flush=True)
        finally:
            load.stop()
            self.finish(load)
        return self.summary(n, time.monotonic() - started)

    def finish(self, load: Load) -> None:
        bad, intact = load.verify(self.node.client(request_timeout_ms=5000))
        self.violations += [f"final: {v}" for v in bad]
        self.verified += intact
        if self.node.stop() != 0:
            self.violations.append("final: the node did not stop cleanly")
        report = fsck.check(self.data_dir)
        self.violations += [f"fsck: {p}" for p in report.problems if p.severity == "error"]

    def summary(self, iterations: int, elapsed_s: float) -> int:
        for violation in self.violations[:50]:
            print("VIOLATION", violation)
        kills = ", ".join(f"{role} {count}" for role, count in sorted(self.kills.items()))
        print(f"summary: iterations {iterations}, elapsed {elapsed_s:.0f}s, kills: {kills}, "
              f"acked writes verified {self.verified}, violations {len(self.violations)}, "
              f"seed {self.args.seed}, data {self.data_dir}", flush=True)
        return 1 if self.violations else 0


def main(argv: list[str]) -> int:
    # SIGTERM unwinds like Ctrl-C: the node it started is stopped, not left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return Loop(parse(argv)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
