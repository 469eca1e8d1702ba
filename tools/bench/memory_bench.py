"""What a node's memory costs: the terms of docs/OPERATIONS.md's formula, measured.

    flock /work/rooms/.bench.lock python3 tools/bench/memory_bench.py [--topics 2000]
        [--records 2000000] [--ephemeral 400000] [--watchers 200] [--shards 2] [--json OUT]

One node (its defaults, checkpoints every 2 s so that loaded records are absorbed soon),
in steps, each measured as the anonymous memory of the whole node: every process's
`Pss_Anon` (its share of the anonymous pages it maps) summed, the median of 5 samples a
second apart once the step has settled. Each term is the step's gain over the one before,
divided by what the step added:

1. idle: the node started, nothing asked of it;
2. topics: `--topics` empty `disk` topics created;
3. records: `--records` records of 100 bytes into 20 of them (`disk`, appends of 1000
   records from 4 client sessions), then until every shard took in a snapshot covering
   them; and the same right after loading (records still indexed in the WAL);
4. ephemeral: `--ephemeral` records into 5 ephemeral topics (their frames live in memory);
5. watchers: `--watchers` watch streams over HTTP, one topic each, open and idle.

Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH"))
                                           if p)

from tools.soak.process_sampler import node_processes, sample_all  # noqa: E402
from tools.testing.node_harness import Node, http_call, wait_for  # noqa: E402
from topics_actors.client import AsyncClient  # noqa: E402

MIB = 1 << 20
NODE_ENV = {"TOPICS_CHECKPOINT_INTERVAL_MS": "2000"}
PAD = "x" * 86          # a record's data is 100 bytes of JSON


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def node_anon(node: Node, settle_s: float = 3.0, samples: int = 5) -> dict:
    """The node's anonymous memory (median of `samples`), in total and per process."""
    time.sleep(settle_s)
    rounds = []
    for _ in range(samples):
        rounds.append(sample_all(node_processes(node.status())))
        time.sleep(1.0)
    names = set.intersection(*(set(r) for r in rounds))
    per = {name: statistics.median(r[name].anon_bytes for r in rounds) for name in names}
    return {"total": sum(per.values()), "processes": per}


async def load(endpoint: str, topics: list[str], records: int, durability: str) -> None:
    clients = [AsyncClient(endpoint, request_timeout_ms=30_000) for _ in range(4)]
    batch = [{"data": {"n": 0, "p": PAD}}] * 1000
    per_topic = records // len(topics)

    async def one(client: AsyncClient, names: list[str]) -> None:
        for name in names:
            for _ in range(0, per_topic, len(batch)):
                await client.append(name, batch, config={"durability": durability})
    await asyncio.gather(*(one(c, topics[i::4]) for i, c in enumerate(clients)))
    for client in clients:
        await client.close()


def absorbed(node: Node) -> None:
    """Wait until every shard took in a snapshot taken after now (so covering the load)."""
    client = node.client(request_timeout_ms=10_000)
    first = {s["shard"]: s["snapshot_id"] for s in client.shard_statuses()}
    wait_for(lambda: all(s["snapshot_id"] >= first[s["shard"]] + 2
                         for s in client.shard_statuses()), 300, "two snapshots taken in")


def open_watchers(node: Node, topics: list[str], count: int) -> list[socket.socket]:
    socks = []
    for i in range(count):
        body = {"topics": {topics[i % len(topics)]: {"tail": True}}}
        wid = http_call(node.http_port, "POST", "/v0/watch", body).json()["wid"]
        sock = socket.create_connection(("127.0.0.1", node.http_port), timeout=10)
        sock.sendall(f"GET /v0/watch/{wid} HTTP/1.1\r\nHost: x\r\n"
                     f"Accept: text/event-stream\r\n\r\n".encode())
        assert b" 200 " in sock.recv(4096).split(b"\r\n")[0]
        socks.append(sock)
    return socks


def run(args: argparse.Namespace) -> dict:
    base = tempfile.mkdtemp(prefix="memory-bench-")
    node = Node(f"{base}/data", args.shards, NODE_ENV, log_path=f"{base}/node.log")
    node.start(timeout_s=120)
    steps, socks = {}, []
    try:
        steps["idle"] = node_anon(node)
        progress(f"idle {steps['idle']['total'] / MIB:.1f} MiB")
        client = node.client(request_timeout_ms=30_000)
        names = [f"m{i:05d}" for i in range(args.topics)]
        for name in names:
            client.put_topic(name, durability="disk")
        steps["topics"] = node_anon(node)
        started = time.monotonic()
        asyncio.run(load(node.endpoint, names[:20], args.records, "disk"))
        progress(f"loaded {args.records} in {time.monotonic() - started:.1f} s")
        steps["records_wal"] = node_anon(node, settle_s=0.5)
        absorbed(node)
        steps["records"] = node_anon(node)
        ephemeral = [f"e{i}" for i in range(5)]
        asyncio.run(load(node.endpoint, ephemeral, args.ephemeral, "ephemeral"))
        steps["ephemeral"] = node_anon(node)
        steps["ram_bytes"] = sum(s["ram_bytes"] for s in client.shard_statuses())
        socks = open_watchers(node, names[:20], args.watchers)
        steps["watchers"] = node_anon(node)
    finally:
        for sock in socks:
            sock.close()
        node.stop()
    return steps


def terms(steps: dict, args: argparse.Namespace) -> list[tuple[str, float, str]]:
    def gain(step: str, before: str) -> float:
        return steps[step]["total"] - steps[before]["total"]
    return [
        ("idle node", steps["idle"]["total"] / MIB, "MiB"),
        ("per topic", gain("topics", "idle") / args.topics / 1024, "KiB"),
        ("per retained record, logged, in the WAL index", gain("records_wal", "topics")
         / args.records, "B"),
        ("per retained record, logged, absorbed", gain("records", "topics") / args.records,
         "B"),
        ("per retained record, ephemeral (frames included)", gain("ephemeral", "records")
         / args.ephemeral, "B"),
        ("per retained record, ephemeral, frames left out",
         (gain("ephemeral", "records") - steps["ram_bytes"]) / args.ephemeral, "B"),
        ("per watch stream", gain("watchers", "ephemeral") / args.watchers / 1024, "KiB"),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--ephemeral", type=int, default=400_000)
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    steps = run(args)
    print("| term | measured |\n|---|---:|")
    for name, value, unit in terms(steps, args):
        print(f"| {name} | {value:.1f} {unit} |")
    print("\n| step | node anon MiB | " + " | ".join(sorted(steps["idle"]["processes"])) + " |")
    for step, figures in steps.items():
        if isinstance(figures, dict):
            per = figures["processes"]
            print(f"| {step} | {figures['total'] / MIB:.1f} | " + " | ".join(
                f"{per.get(name, 0) / MIB:.1f}" for name in sorted(steps["idle"]["processes"]))
                + " |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(steps, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
