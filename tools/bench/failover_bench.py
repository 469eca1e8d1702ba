"""How long a replicated topic stops taking `acks: all` writes when its leader's node is
killed (issue 33 item 1).

    python tools/bench/failover_bench.py [--runs 5] [--session-ms 6000] [--writers 4]

Starts one ZooKeeper and three nodes on loopback (TOPICS_ZK_SESSION_TIMEOUT_MS as given:
the production default 6000 unless told), then, once per run: an RF 3 `fsync` topic
(min_isr 2), writers appending one record at a time with `acks: all` through another node
(the ZeroMQ client, routing: each follows the leader), and kill -9 of the leader's whole
node. It reports, median and min-max of the runs:

- `election`: the kill to the new leader in ZooKeeper (the session timeout, mostly);
- `first ack`: the kill to the first `acks: all` write acknowledged after it (the issue's
  figure), and what of it came after the election;
- `errors`: the writers' errors over the run (an `outcome_unknown` is retried with its key).

After each run a fresh node (a new node id) takes the killed one's place. Everything the
bench started is stopped at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [REPO_ROOT, HERE]

from bench_stats import fmt_spread, spread  # noqa: E402
from node_proc import NodeProcess, kill_group, machine_busy_s  # noqa: E402
from replication_bench import _temp_dir, start_nodes, wait_isr  # noqa: E402
from tools.testing.zookeeper_server import ZooKeeperServer  # noqa: E402
from topics_actors.client import Client  # noqa: E402
from topics_actors.cluster.metadata_store import MetadataStore  # noqa: E402
from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes  # noqa: E402
from topics_actors.errors import TopicsError  # noqa: E402

log = logging.getLogger(__name__)
ELECTION_DEADLINE_S = 60.0


class Writers:
    """`count` threads appending with `acks: all` through `endpoint`; ack times kept."""

    def __init__(self, endpoint: str, topic: str, count: int):
        self.endpoint, self.topic = endpoint, topic
        self.acks: list[float] = []
        self.errors: dict[str, int] = {}
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]

    def start(self) -> "Writers":
        for thread in self.threads:
            thread.start()
        return self

    def _run(self) -> None:
        client = Client(self.endpoint, retry_deadline_ms=30_000)
        key = None
        try:
            while not self.halt.is_set():
                try:
                    client.append(self.topic, [{"data": {"t": time.time()}}], acks="all",
                                  idempotency_key=key)
                except TopicsError as error:
                    with self.lock:
                        self.errors[error.code.wire] = self.errors.get(error.code.wire, 0) + 1
                    known = error.code.wire == "outcome_unknown"
                    key = error.detail["idempotency_key"] if known else None
                    continue
                key = None
                with self.lock:
                    self.acks.append(time.monotonic())
        finally:
            client.close()

    def stop(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(60)

    def first_after(self, when: float) -> float | None:
        with self.lock:
            return next((t for t in self.acks if t > when), None)


def one_run(nodes: list[NodeProcess], observer: MetadataStore, run: int, writers: int,
            node_ids: dict) -> tuple[dict, NodeProcess]:
    topic = f"failover-{run}"
    nodes[0].client.put_topic(topic, replication_factor=3, durability="fsync", min_isr=2)
    leader = wait_isr(nodes[0], topic, 3)["leader"]
    victim = next(n for n in nodes if node_ids[id(n)] == leader)
    entry = next(n for n in nodes if n is not victim)
    load = Writers(entry.endpoint, topic, writers).start()
    deadline = time.monotonic() + 30
    while len(load.acks) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = time.monotonic()
    kill_group(victim.proc)
    while True:
        state = observer.read(topic).state
        if state.leader not in (None, leader):
            elected = time.monotonic()
            break
        if time.monotonic() - killed > ELECTION_DEADLINE_S:
            raise TimeoutError(f"{topic}: no new leader after {ELECTION_DEADLINE_S:.0f} s")
        time.sleep(0.005)
    # the dead leader cannot answer after its death; 50 ms covers replies already sent
    while load.first_after(killed + 0.05) is None and time.monotonic() - killed < 60:
        time.sleep(0.01)
    first = load.first_after(killed + 0.05)
    load.stop()
    if os.environ.get("FAILOVER_TRACE"):
        print(f"killed at wall {time.time() - (time.monotonic() - killed):.3f} elected +"
              f"{elected - killed:.3f} first +{(first or killed) - killed:.3f}")
        for node in nodes:
            if node is victim:
                continue
            with open(os.path.join(node.tmp, "node.log"), errors="replace") as handle:
                for line in handle:
                    if topic in line or "leader" in line:
                        print(node_ids[id(node)], line.rstrip()[:200])
    result = {"election_s": elected - killed,
              "first_ack_s": (first - killed) if first else None,
              "after_election_s": (first - elected) if first else None,
              "errors": load.errors, "acks": len(load.acks)}
    log.info("run %d: %s", run, result)
    return result, victim


def replace(stack, nodes: list[NodeProcess], victim: NodeProcess, zk: str, session_ms: int,
            node_ids: dict, serial: int) -> None:
    victim.stop()
    fresh = NodeProcess(2, env=cluster_env(zk, f"n{serial}", session_ms))
    node_ids[id(fresh)] = f"n{serial}"
    start_nodes(stack, [fresh])
    nodes[nodes.index(victim)] = fresh


def cluster_env(zk: str, node_id: str, session_ms: int) -> dict:
    return {"TOPICS_ZK": zk, "TOPICS_NODE_ID": node_id,
            "TOPICS_ZK_SESSION_TIMEOUT_MS": str(session_ms), "TOPICS_GATEWAY_WORKERS": "1"}


def zk_cluster(stack: contextlib.ExitStack, ids: list[str], session_ms: int
               ) -> tuple[ZooKeeperServer, list[NodeProcess], MetadataStore]:
    """One ZooKeeper, a node of two shards per id joined to it, and a session of the
    bench's own reading the cluster's metadata; all stopped with `stack`."""
    zookeeper = ZooKeeperServer(_temp_dir(stack, "topics-bench-zk-"))
    stack.callback(zookeeper.stop)
    zookeeper.start()
    nodes = [NodeProcess(2, env=cluster_env(zookeeper.connect, n, session_ms)) for n in ids]
    start_nodes(stack, nodes)
    observer = MetadataStore(ZooKeeperZnodes(zookeeper.connect, 10_000), "bench")
    stack.callback(observer.znodes.close)
    return zookeeper, nodes, observer


def _fmt(values: list[float]) -> str:
    return fmt_spread(spread(values), lambda v: f"{v:.2f} s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument("--writers", type=int, default=4)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    busy0, started = machine_busy_s(), time.monotonic()
    with contextlib.ExitStack() as stack:
        ids = ["n0", "n1", "n2"]
        zookeeper, nodes, observer = zk_cluster(stack, ids, args.session_ms)
        node_ids = {id(node): name for node, name in zip(nodes, ids)}
        results = []
        for run in range(args.runs):
            result, victim = one_run(nodes, observer, run, args.writers, node_ids)
            results.append(result)
            if run + 1 < args.runs:
                replace(stack, nodes, victim, zookeeper.connect, args.session_ms, node_ids,
                        3 + run)
    elapsed = time.monotonic() - started
    busy = (machine_busy_s() - busy0) / elapsed
    print(f"\nfailover, kill -9 of the leader's node, {args.runs} runs, session "
          f"{args.session_ms} ms, {args.writers} writers (`acks: all`, ZeroMQ client "
          f"through another node); machine busy {busy:.2f} cores of the run\n")
    print("| measure | median (min-max) |\n|---|---|")
    print(f"| kill -> new leader in ZooKeeper | {_fmt([r['election_s'] for r in results])} |")
    print(f"| kill -> first acked write | {_fmt([r['first_ack_s'] for r in results])} |")
    print(f"| new leader -> first acked write | "
          f"{_fmt([r['after_election_s'] for r in results])} |")
    print(f"\nwriter errors per run: {[r['errors'] for r in results]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
