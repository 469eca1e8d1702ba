"""What a node's memory costs: the terms of docs/OPERATIONS.md's formula, measured.

    flock /work/rooms/.bench.lock python3 tools/bench/memory_bench.py [--topics 2000]
        [--records 2000000] [--ephemeral 400000] [--watchers 200] [--sessions 8]
        [--session-topics 50] [--shards 2] [--original PATH] [--json OUT]

One node (its defaults, checkpoints every 2 s so that loaded records are absorbed soon),
in steps, each measured as the anonymous memory of the whole node: every process's
`Pss_Anon` (its share of the anonymous pages it maps) summed, the median of 5 samples a
second apart once the step has settled. Each term is the step's gain over the one before,
divided by what the step added:

1. idle: the node started, nothing asked of it;
2. topics: `--topics` empty `disk` topics created;
3. records, per logged class (fsync, disk, memory): `--records` records of 100 bytes into
   20 new topics of that class (appends of 1000 records from 4 client sessions), then until
   every shard took in a snapshot covering them (a record still indexed in the WAL costs 8
   bytes more: its location); the 20 topics' own cost (step 2's) left out;
4. ephemeral: `--ephemeral` records into 5 ephemeral topics (their frames live in memory);
5. watchers: `--watchers` watch streams over HTTP, one topic each, open and idle;
6. sessions: `--sessions` clients each append 600 single records to each of
   `--session-topics` other topics (a full ring of idempotency keys per topic and session,
   in its shard and in the compactor), the records' own cost (step 3's) left out.

Then the original server (`--original`, if built) idle and with `--records` records loaded
over HTTP into 10 topics (start_bench.py's loader), its Pss_Anon likewise.

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import start_bench  # noqa: E402  (a sibling: the original server and its HTTP loader)
from tools.soak.process_sampler import node_processes, sample_all  # noqa: E402
from tools.testing.node_harness import Node, http_call, wait_for  # noqa: E402
from topics_actors.client import AsyncClient  # noqa: E402

MIB = 1 << 20
SESSION_APPENDS = 600   # more than a ring keeps (ledger/dedupe_index.py)
LOGGED = ("fsync", "disk", "memory")
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


async def sessions(endpoint: str, topics: list[str], count: int, appends: int) -> None:
    """`count` client sessions, each `appends` one-record appends to every topic: a full
    ring of idempotency keys per (topic, session) in its shard and in the compactor."""
    clients = [AsyncClient(endpoint, request_timeout_ms=30_000) for _ in range(count)]
    record = [{"data": {"n": 0, "p": PAD}}]

    async def one(client: AsyncClient) -> None:
        for _ in range(appends):
            await asyncio.gather(*(client.append(name, record) for name in topics))
    await asyncio.gather(*(one(client) for client in clients))
    for client in clients:
        await client.close()


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


def snapshot_ids(node: Node) -> dict[int, int]:
    return {s["shard"]: s["snapshot_id"]
            for s in node.client(request_timeout_ms=10_000).shard_statuses()}


def absorbed(node: Node, ended: dict[int, int], quiet_s: float = 5.0) -> None:
    """Wait until every shard took in a snapshot begun after the load ended (`ended`: the
    snapshot ids then): a newer one, and no newer still for `quiet_s` (a checkpoint comes
    only after writes, so the last one covers them all)."""
    client = node.client(request_timeout_ms=10_000)
    seen, since = dict(ended), time.monotonic()

    def settled() -> bool:
        nonlocal seen, since
        now = {s["shard"]: s["snapshot_id"] for s in client.shard_statuses()}
        if now != seen:
            seen, since = now, time.monotonic()
        return (all(now[k] > ended[k] for k in now)
                and time.monotonic() - since >= quiet_s)
    wait_for(settled, 300, "a snapshot after the load, taken in", interval_s=0.5)


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
        for durability in LOGGED:       # 20 topics of each, created by the appends
            started = time.monotonic()
            asyncio.run(load(node.endpoint, [f"r-{durability}-{i}" for i in range(20)],
                             args.records, durability))
            progress(f"loaded {args.records} {durability} in "
                     f"{time.monotonic() - started:.1f} s")
            absorbed(node, snapshot_ids(node))
            steps[f"records_{durability}"] = node_anon(node)
        steps["records"] = steps[f"records_{LOGGED[-1]}"]
        ephemeral = [f"e{i}" for i in range(5)]
        asyncio.run(load(node.endpoint, ephemeral, args.ephemeral, "ephemeral"))
        steps["ephemeral"] = node_anon(node)
        steps["ram_bytes"] = sum(s["ram_bytes"] for s in client.shard_statuses())
        socks = open_watchers(node, names[:20], args.watchers)
        steps["watchers"] = node_anon(node)
        ended = snapshot_ids(node)
        asyncio.run(sessions(node.endpoint, names[20:20 + args.session_topics],
                             args.sessions, SESSION_APPENDS))
        absorbed(node, ended)
        steps["sessions"] = node_anon(node)
    finally:
        for sock in socks:
            sock.close()
        node.stop()
    return steps


def run_original(args: argparse.Namespace) -> dict:
    """The original server: idle, then `--records` records loaded over HTTP (its default
    class, as start_bench loads it), each its process's Pss_Anon."""
    base = tempfile.mkdtemp(prefix="memory-bench-original-")
    server = start_bench.Server("original", f"{base}/data", args.original)
    server.start()
    try:
        time.sleep(3.0)
        idle = server.pss_bytes()[1]
        start_bench.load(server, args.records)
        time.sleep(3.0)
        loaded = server.pss_bytes()[1]
    finally:
        server.stop()
    return {"idle": idle, "loaded": loaded}


def terms(steps: dict, args: argparse.Namespace) -> list[tuple[str, float, str]]:
    def gain(step: str, before: str) -> float:
        return steps[step]["total"] - steps[before]["total"]
    per_topic = gain("topics", "idle") / args.topics
    before = ["topics"] + [f"records_{d}" for d in LOGGED]
    logged = [(f"per retained record, {d}, absorbed",
               (gain(f"records_{d}", before[i]) - 20 * per_topic) / args.records, "B")
              for i, d in enumerate(LOGGED)]
    per_record = statistics.median(value for _, value, _ in logged)
    return [
        ("idle node", steps["idle"]["total"] / MIB, "MiB"),
        ("per topic", per_topic / 1024, "KiB"),
        *logged,
        ("per retained record, ephemeral (frames included)", gain("ephemeral", "records")
         / args.ephemeral, "B"),
        ("per retained record, ephemeral, frames left out",
         (gain("ephemeral", "records") - steps["ram_bytes"]) / args.ephemeral, "B"),
        ("per watch stream", gain("watchers", "ephemeral") / args.watchers / 1024, "KiB"),
        ("per (topic, client session) writing", (gain("sessions", "watchers") - per_record
                                                 * args.sessions * args.session_topics
                                                 * SESSION_APPENDS)
         / (args.sessions * args.session_topics) / 1024, "KiB"),
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--ephemeral", type=int, default=400_000)
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--session-topics", type=int, default=50)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--original", default=start_bench.ORIGINAL,
                        help="the original server's binary ('' to leave it out)")
    args = parser.parse_args(argv)
    steps = run(args)
    print("| term | measured |\n|---|---:|")
    for name, value, unit in terms(steps, args):
        print(f"| {name} | {value:.1f} {unit} |")
    if args.original and os.path.exists(args.original):
        steps["original"] = original = run_original(args)
        print(f"| the original: idle | {original['idle'] / MIB:.1f} MiB |")
        print(f"| the original: per retained record, its default class | "
              f"{(original['loaded'] - original['idle']) / args.records:.1f} B |")
    print("\n| step | node anon MiB | " + " | ".join(sorted(steps["idle"]["processes"])) + " |")
    for step, figures in steps.items():
        if isinstance(figures, dict) and "processes" in figures:
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
