"""The CPU cost of replicating a record, in process: a leader shard and a follower shard of
two nodes (tools/testing/replica_pair.py), no sockets, no other process.

    python tools/bench/replica_cost_bench.py [--runs 5] [--records 64000] [--batch 64]
                                             [--profile]

The leader takes `--records` records in `--batch`-record appends, each with an idempotency
key as the client library sends (so an IdemKey frame follows each append's frames in the
leader's WAL), the 100-byte JSON record of core_bench, `memory` class (no fdatasync: CPU
only); none of that is measured. Then the follower
fetches until it holds them all. Measured per fetch, in process CPU time (not wall time, so
a busy machine disturbs it less): the leader's answer (its core reads the range and encodes
the reply, as its shell sends it), the decoding of that reply (the follower's shell), and
the follower's core staging and committing it. Reported: CPU microseconds per record of
each and their sum, the medians of `--runs` fresh pairs. Compare trees back to back with
PYTHONPATH=<tree>: the bench uses only what trees before raw-frame fetch answers have too
(a follower of such a tree asks for records, one of a later tree for frames).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import shutil
import statistics
import tempfile
import time

from tools.testing.replica_pair import ReplicaPair
from tools.testing.shard_harness import ShardEnv
from topics_actors.protocol import decode_reply
from topics_actors.protocol.messages import Append, ReplicaFetch
from topics_actors.shard.replication.replica_book import ReplicaAnswer
from topics_actors.storage.fs import RealFs

RECORD = [b'{"sku":"A-1","qty":2,"note":"a hundred bytes of json payload for the bench.."}']
TOPIC = "t"


def _pair(root: str) -> ReplicaPair:
    envs = []
    for name in ("a", "b"):
        os.makedirs(os.path.join(root, name))
        envs.append(ShardEnv(os.path.join(root, name), RealFs()))
    return ReplicaPair(*envs, TOPIC, {"durability": "memory"}, file_bytes=256 << 20)


def _commit(core, msg) -> bytes:
    core.submit(b"p", 1, msg, 0)
    (_, raw), = core.commit()
    return raw


def _fill(pair: ReplicaPair, records: int, batch: int) -> None:
    for i in range(records // batch):
        pair.leader.call(Append(TOPIC, [RECORD] * batch, None, f"~b:{i}", acks="leader"))


def _catch_up(pair: ReplicaPair) -> list[float]:
    """Fetch until the follower holds the leader's head: CPU seconds of [leader answer,
    reply decoding, follower staging and commit]."""
    spent = [0.0, 0.0, 0.0]
    leader, follower = pair.leader.core, pair.follower.core
    head = leader.registry.get(TOPIC).head
    clock = time.process_time
    while follower.registry.get(TOPIC).head < head:
        for name, _endpoint, ask in follower.replicas.follower.requests():
            if isinstance(ask, ReplicaFetch):
                ask = dataclasses.replace(ask, wait_ms=0)
            t0 = clock()
            raw = _commit(leader, ask)
            t1 = clock()
            body = decode_reply(raw)[1]
            t2 = clock()
            _commit(follower, ReplicaAnswer(name, ask.KIND, body))
            t3 = clock()
            if isinstance(ask, ReplicaFetch):
                spent[0] += t1 - t0
                spent[1] += t2 - t1
                spent[2] += t3 - t2
    return spent


def one_run(records: int, batch: int, profiler: cProfile.Profile | None = None
            ) -> list[float]:
    """CPU us per record of [leader answer, decoding, follower staging and commit]."""
    root = tempfile.mkdtemp(prefix="topics-replica-bench-")
    pair = _pair(root)
    try:
        _fill(pair, records, batch)
        if profiler is not None:
            profiler.enable()
        spent = _catch_up(pair)
        if profiler is not None:
            profiler.disable()
        return [s / records * 1e6 for s in spent]
    finally:
        pair.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=64_000)
    parser.add_argument("--batch", type=int, default=64, help="records per append")
    parser.add_argument("--profile", action="store_true",
                        help="one run under cProfile, functions by own time")
    args = parser.parse_args()
    records = args.records // args.batch * args.batch
    if args.profile:
        profiler = cProfile.Profile()
        one_run(records, args.batch, profiler)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        return
    runs = [one_run(records, args.batch) for _ in range(args.runs)]
    leader, decode, follower, total = (statistics.median(r[i] if i < 3 else sum(r)
                                                         for r in runs) for i in range(4))
    print(f"replicated record, CPU us: leader answer {leader:.2f}, decode {decode:.2f}, "
          f"follower stage+commit {follower:.2f}, sum {total:.2f} "
          f"({records} records in {args.batch}-record appends, medians of {args.runs})")


if __name__ == "__main__":
    main()
