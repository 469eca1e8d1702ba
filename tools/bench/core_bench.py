"""The shard core's own CPU cost, in process: no sockets, no client, no other process.

    python tools/bench/core_bench.py [--runs 5] [--singles 20000] [--records 300000]
                                     [--replay-batch 500] [--staging] [--profile N]

Measures process CPU time (not wall time), so a busy machine disturbs it far less than
the end-to-end benches: the figure to compare before and after a change to the shard
(run both trees back to back with the same command; PYTHONPATH=<tree> picks the code).

- single: a memory-class single-record append, one commit each (submit, write, publish,
  reply): microseconds of CPU per request.
- batch: 64-record appends, one commit each: microseconds of CPU per record, for the two
  forms of an Append: a list of records, and the array form the client library sends (one
  JSON text of the datas), the latter decoded from its wire bytes as the shell does.
- replay: recovery of a WAL of `--records` disk-class records over 10 topics, in turn,
  `--replay-batch` per append (500; 1 makes every frame's neighbour another topic's):
  seconds of CPU, and frames per second.
Each is the median of `--runs`. Two options measure one thing instead:
- --staging: the staging of a batch (record_batch.stage_batch) and the encoding of its
  Append frames, CPU ns per record by batch size and record shape (medians of `--runs`).
- --profile N: a cProfile of N 64-record appends in the array form (decode, submit,
  commit), functions by cumulative time (shares of the header's total) and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import tempfile
import time

from topics_actors.config import ShardOptions
from topics_actors.protocol import decode, encode
from topics_actors.protocol.messages import Append, PutTopic
from topics_actors.record_batch import VouchedRecords, stage_batch
from topics_actors.shard.shard_core import ShardCore
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout

try:
    from topics_actors.shard.batch_stager import encode_staged
except ImportError:     # a tree from before issue 18's per-record work: one encoder
    from topics_actors.storage.frame import encode_appends as encode_staged

RECORD = [b'{"sku":"A-1","qty":2,"note":"a hundred bytes of json payload for the bench.."}']
ARRAY = b"[" + b",".join([RECORD[0]] * 64) + b"]"     # 64 records in the array form


def open_core(data_dir: str) -> tuple[ShardCore, float]:
    """A ready shard core over `data_dir`, and the CPU seconds its recovery took."""
    core = ShardCore(RealFs(), ShardOptions(data_dir, 0, 1, wal_file_bytes=256 << 20,
                                            background_prealloc=False))
    t0 = time.process_time()
    for _ in core.replay().run():
        pass
    core.ready = True
    return core, time.process_time() - t0


def call(core: ShardCore, msg) -> None:
    core.submit(b"p", 0, msg, 0)
    core.commit()


def call_wire(core: ShardCore, raw: bytes) -> None:
    """A request as the shell takes it: decoded from its envelope, then submitted."""
    corr, msg = decode(raw)
    core.submit(b"p", corr, msg, 0)
    core.commit()


def appends(singles: int) -> tuple[float, float, float]:
    """(CPU us per single-record append, CPU us per record of 64-record appends in list
    form, and in the array form from the wire)."""
    data_dir = tempfile.mkdtemp(prefix="topics-core-bench-")
    try:
        prepare_layout(RealFs(), data_dir, 1)
        core, _ = open_core(data_dir)
        call(core, PutTopic("t", {"durability": "memory"}))
        t0 = time.process_time()
        for i in range(singles):
            call(core, Append("t", [RECORD], None, f"~s:{i}"))
        single = (time.process_time() - t0) / singles * 1e6
        batches = max(1, singles // 32)
        t0 = time.process_time()
        for i in range(batches):
            call(core, Append("t", [RECORD] * 64, None, f"~b:{i}"))
        per_record = (time.process_time() - t0) / (batches * 64) * 1e6
        raws = [encode(Append("t", ARRAY, None, f"~a:{i}"), i) for i in range(batches)]
        t0 = time.process_time()
        for raw in raws:
            call_wire(core, raw)
        per_array = (time.process_time() - t0) / (batches * 64) * 1e6
        core.close()
        return single, per_record, per_array
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def replay(records: int, runs: int, batch: int = 500) -> list[float]:
    data_dir = tempfile.mkdtemp(prefix="topics-core-bench-")
    try:
        prepare_layout(RealFs(), data_dir, 1)
        core, _ = open_core(data_dir)
        for t in range(10):
            call(core, PutTopic(f"t{t}", {"durability": "disk"}))
        for i in range(records // batch):
            call(core, Append(f"t{i % 10}", [RECORD] * batch))
        core.close()
        times = []
        for _ in range(runs):
            core, seconds = open_core(data_dir)
            times.append(seconds)
            core.close()
        return times
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def staging(runs: int) -> None:
    """CPU ns per record of stage_batch and of encoding the staged frames, per batch size."""
    shapes = {"[data]": RECORD, "[data,None,None,None]": RECORD + [None, None, None],
              "vouched [data]": RECORD}     # the gateway's appends: data not parsed again
    for name, shape in shapes.items():
        for size in (1, 8, 16, 64, 1000):
            batch = [list(shape) for _ in range(size)]
            if name.startswith("vouched"):
                batch = VouchedRecords(batch)
            staged = stage_batch(batch, None)
            loops = max(1, 64_000 // size)
            stage_ns, encode_ns = [], []
            for _ in range(runs):
                t0 = time.process_time()
                for _ in range(loops):
                    stage_batch(batch, None)
                t1 = time.process_time()
                for _ in range(loops):
                    encode_staged(bytearray(), 7, 1, 0, 0, staged)
                t2 = time.process_time()
                stage_ns.append((t1 - t0) / (loops * size) * 1e9)
                encode_ns.append((t2 - t1) / (loops * size) * 1e9)
            print(f"{name} x {size}: stage {statistics.median(stage_ns):.0f} ns, encode "
                  f"{statistics.median(encode_ns):.0f} ns CPU per record")


def profile(appends: int) -> None:
    data_dir = tempfile.mkdtemp(prefix="topics-core-bench-")
    try:
        prepare_layout(RealFs(), data_dir, 1)
        core, _ = open_core(data_dir)
        call(core, PutTopic("t", {"durability": "memory"}))
        raws = [encode(Append("t", ARRAY, None, f"~b:{i}"), i) for i in range(appends)]
        profiler = cProfile.Profile()
        profiler.enable()
        for raw in raws:
            call_wire(core, raw)
        profiler.disable()
        core.close()
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(16)
        stats.sort_stats("tottime").print_stats(12)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--singles", type=int, default=20_000)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--replay-batch", type=int, default=500, metavar="N")
    parser.add_argument("--staging", action="store_true")
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.replay_batch < 1:
        parser.error("--replay-batch must be at least 1")
    if args.staging:
        staging(args.runs)
        return
    if args.profile:
        profile(args.profile)
        return
    results = [appends(args.singles) for _ in range(args.runs)]
    single = statistics.median(r[0] for r in results)
    per_record = statistics.median(r[1] for r in results)
    per_array = statistics.median(r[2] for r in results)
    times = replay(args.records, args.runs, args.replay_batch)
    seconds = statistics.median(times)
    print(f"single append: {single:.1f} us CPU per request; 64-record appends: "
          f"{per_record:.2f} us CPU per record (array form from the wire: {per_array:.2f}); "
          f"replay of {args.records} records: "
          f"{seconds:.3f} s CPU ({args.records / seconds / 1e6:.2f} M frames/s); "
          f"medians of {args.runs}")


if __name__ == "__main__":
    main()
