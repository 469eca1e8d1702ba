"""How long moving a replica onto another node takes, and what the move costs the writes
(docs/CLUSTER.md 8, issue 33 item 5).

    python tools/bench/move_bench.py [--runs 3] [--records 200000] [--size 100]

Starts one ZooKeeper and three nodes on loopback, then, once per run: an RF 2 `fsync`
topic filled with `--records` records of `--size` bytes (batches of 1000, `acks: all`),
one writer appending one record at a time with `acks: all` through the third node, and a
move of the follower's copy onto the third node (POST /v0/cluster/move, the leader kept:
the figure is the new copy's catch-up, not a failover). It reports, median and min-max of
the runs:

- `move`: the POST to the topic's state done in ZooKeeper (the new copy in the ISR, the
  old one gone), and the records per second the new copy caught up at;
- the writer's acks per second in the 2 s before the move and during it, and its errors.

Everything the bench started is stopped at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO_ROOT, HERE]

from bench_stats import fmt_rate, fmt_spread, spread  # noqa: E402
from failover_bench import Writers, zk_cluster  # noqa: E402
from node_proc import NodeProcess, machine_busy_s  # noqa: E402
from replication_bench import wait_isr  # noqa: E402
from tools.testing.node_harness import http_call  # noqa: E402
from topics_actors.cluster.metadata_store import MetadataStore  # noqa: E402

log = logging.getLogger(__name__)
MOVE_DEADLINE_S = 600.0
BATCH = 1000


def fill(node: NodeProcess, topic: str, records: int, size: int) -> None:
    body = {"pad": "x" * max(0, size - 12)}
    for start in range(0, records, BATCH):
        node.client.append(topic, [{"data": body}] * min(BATCH, records - start), acks="all")


def acks_between(writers: Writers, start: float, end: float) -> int:
    with writers.lock:
        return sum(start <= t < end for t in writers.acks)


def one_run(nodes: list[NodeProcess], ids: list[str], observer: MetadataStore, run: int,
            args) -> dict:
    topic = f"move-{run}"
    nodes[0].client.put_topic(topic, replication_factor=2, durability="fsync")
    state = observer.read(topic).state
    wait_isr(nodes[0], topic, 2)
    leader = state.leader
    spare = next(n for n in ids if n not in state.replicas)
    fill(nodes[ids.index(leader)], topic, args.records, args.size)
    entry = nodes[ids.index(spare)]
    load = Writers(entry.endpoint, topic, 1).start()
    time.sleep(2.0)
    asked = time.monotonic()
    reply = http_call(entry.ports["http"], "POST", "/v0/cluster/move",
                      {"topic": topic, "replicas": [leader, spare]})
    if reply.status != 200:
        raise RuntimeError(f"move refused: {reply.status} {reply.body!r}")
    while True:
        now = observer.read(topic).state
        if now.target is None and set(now.replicas) == {leader, spare}:
            done = time.monotonic()
            break
        if time.monotonic() - asked > MOVE_DEADLINE_S:
            raise TimeoutError(f"{topic}: not moved after {MOVE_DEADLINE_S:.0f} s: {now}")
        time.sleep(0.01)
    load.stop()
    took = done - asked
    result = {"move_s": took, "catch_up_rps": args.records / took,
              "acks_before": acks_between(load, asked - 2.0, asked) / 2.0,
              "acks_during": acks_between(load, asked, done) / max(took, 1e-3),
              "errors": load.errors}
    log.info("run %d: %s", run, result)
    return result


def _seconds(value: float) -> str:
    return f"{value:.2f} s"


def _across(results: list[dict], key: str, fmt=fmt_rate) -> str:
    """One figure over the runs: median (min-max)."""
    return fmt_spread(spread([r[key] for r in results]), fmt)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    busy0, started = machine_busy_s(), time.monotonic()
    ids = ["n0", "n1", "n2"]
    with contextlib.ExitStack() as stack:
        _zookeeper, nodes, observer = zk_cluster(stack, ids, 6000)
        results = [one_run(nodes, ids, observer, run, args) for run in range(args.runs)]
    busy = (machine_busy_s() - busy0) / (time.monotonic() - started)
    print(f"\nreplica move, RF 2 `fsync` topic of {args.records} records of {args.size} B, "
          f"the follower's copy moved to the third node, {args.runs} runs; one `acks: all` "
          f"writer meanwhile; machine busy {busy:.2f} cores of the run\n")
    print("| measure | median (min-max) |\n|---|---|")
    print(f"| move: POST to done | {_across(results, 'move_s', _seconds)} |")
    print(f"| catch-up | {_across(results, 'catch_up_rps')} records/s |")
    print(f"| writer acks/s before the move | "
          f"{_across(results, 'acks_before')} |")
    print(f"| writer acks/s during the move | "
          f"{_across(results, 'acks_during')} |")
    print(f"\nwriter errors per run: {[r['errors'] for r in results]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
