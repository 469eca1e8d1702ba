"""The client's own work per append, with the network taken out.

    python tools/bench/client_overhead.py [--root DIR] [--calls N] [--rounds R]

A Client and an AsyncClient whose shard sockets are replaced by an in-process peer that
answers every request at once (its reply encoded by the real codec), so what is timed is
the library's path (building and encoding the request, routing, the retry loop, matching
and decoding the reply), not ZeroMQ or the shard. `--root` runs the `topics_actors` found
there instead of this checkout's (e.g. an older tree from `git archive`), to compare.
Prints the median and the best of R rounds of N appends of one 100-byte record, in CPU
time of this process (time.process_time: on a shared machine, time spent preempted does
not count).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import time

REPLY = {"topic": "p", "first_seq": 1, "last_seq": 1, "head_seq": 1, "count": 1,
         "created": False, "deduped": False, "seqs": [1],
         "performance": {"server_total_ms": 0.1, "wal_append_ms": 0.0, "fsync_ms": 0.0}}
RECORD = {"data": {"i": 1, "k": "bench", "p": "x" * 70}}
ENDPOINTS = ("tcp://127.0.0.1:2", "tcp://127.0.0.1:3")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="directory holding the topics_actors to time")
    p.add_argument("--calls", type=int, default=50_000, help="appends per round")
    p.add_argument("--rounds", type=int, default=7, help="rounds (median and best)")
    return p.parse_args(argv)


def timed(rounds: int, calls: int, run) -> str:
    per_call = []
    for _ in range(rounds):
        t0 = time.process_time()
        run()
        per_call.append((time.process_time() - t0) / calls * 1e6)
    return f"median {statistics.median(per_call):.2f} us, best {min(per_call):.2f} us"


def sync_case(args) -> str:
    import msgpack
    import zmq
    from topics_actors.client import Client
    from topics_actors.client.shard_map import ShardMap
    from topics_actors.protocol import encode_reply

    class Peer:
        """A socket that has the reply to the last request at once; zmq_poll sees it
        through `fileno`, a pipe with a byte in it (always readable)."""
        corr = 0
        pipe = os.pipe()
        os.write(pipe[1], b"x")

        def fileno(self):
            return self.pipe[0]

        def send(self, raw, flags=0):
            self.corr = msgpack.unpackb(raw)[2]

        def poll(self, timeout_ms=None, flags=zmq.POLLIN):
            return flags

        def recv_multipart(self, flags=0):
            return [encode_reply(self.corr, REPLY)]

        def close(self, linger=None):
            pass
    client = Client("tcp://127.0.0.1:1", request_timeout_ms=5_000)
    peer = Peer()
    shard_map = ShardMap(2, ENDPOINTS, (1, 1), ("ready", "ready"), True)
    if hasattr(client, "_core"):       # the client core (issue 31)
        client._core._reached, client._core.map = True, shard_map
        client._transport._socks.update({0: (ENDPOINTS[0], peer), 1: (ENDPOINTS[1], peer)})
    else:
        client._reached, client._map = True, shard_map
        client._shards = {0: (ENDPOINTS[0], peer), 1: (ENDPOINTS[1], peer)}

    def run():
        for _ in range(args.calls):
            client.append("p", [RECORD])
    return timed(args.rounds, args.calls, run)


def async_cases(args) -> list[str]:
    import msgpack
    from topics_actors.client import AsyncClient
    from topics_actors.client.shard_map import ShardMap
    from topics_actors.protocol import encode_reply

    spec = importlib.util.spec_from_file_location("loopback_connection", os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testing",
        "loopback_connection.py"))
    loopback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loopback)

    def answer(raw: bytes) -> list[bytes]:      # every request answered at once
        return [encode_reply(msgpack.unpackb(raw)[2], REPLY)]

    def Conn(endpoint: str):
        return loopback.LoopbackConnection(endpoint, answer)

    async def main() -> list[str]:
        client = AsyncClient("tcp://127.0.0.1:1")
        shard_map = ShardMap(2, ENDPOINTS, (1, 1), ("ready", "ready"), True)
        conns = {0: Conn(ENDPOINTS[0]), 1: Conn(ENDPOINTS[1])}
        if hasattr(client, "_core"):       # the client core (issue 31)
            client._core._reached, client._core.map = True, shard_map
            client._transport._conns = conns
        else:
            client._reached, client._map, client._conns = True, shard_map, conns

        async def one_by_one():
            for _ in range(args.calls):
                await client.append("p", [RECORD])

        async def producer():
            for _ in range(args.calls // 50):
                await client.append("p", [RECORD])

        async def fifty():
            await asyncio.gather(*(producer() for _ in range(50)))
        out = []
        for case in (one_by_one, fifty):
            per_call = []
            for _ in range(args.rounds):
                t0 = time.process_time()
                await case()
                per_call.append((time.process_time() - t0) / args.calls * 1e6)
            out.append(f"median {statistics.median(per_call):.2f} us, "
                       f"best {min(per_call):.2f} us")
        return out
    return asyncio.run(main())


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, args.root)
    print(f"topics_actors from {args.root}; {args.rounds} rounds of {args.calls} appends")
    print(f"Client.append: {sync_case(args)}")
    serial, fifty = async_cases(args)
    print(f"AsyncClient.append, awaited one by one: {serial}")
    print(f"AsyncClient.append, 50 tasks: {fifty}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
