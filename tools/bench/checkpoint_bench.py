"""The compactor's own CPU cost per record, in process: one checkpoint that absorbs a WAL of
`--records` records into segments.

    python tools/bench/checkpoint_bench.py [--runs 5] [--records 200000] [--topics 4]

A shard core writes the records (64-record disk-class appends of the 100-byte JSON record of
core_bench, spread over `--topics` topics), takes a checkpoint barrier, and a Checkpointer
absorbs everything up to it: the WAL scan and its checksums, the segment frames and
indexes, their writes and fdatasyncs, the snapshot. Reported: CPU microseconds per record
of the checkpoint alone (process time, so a busy machine disturbs it less than wall time),
the median of `--runs` fresh data dirs. Compare trees back to back with PYTHONPATH=<tree>.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from core_bench import RECORD, call, open_core

from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.protocol import decode_reply
from topics_actors.protocol.messages import Append, Checkpoint, PutTopic
from topics_actors.storage.fs import RealFs
from topics_actors.storage.wal_layout import prepare_layout

BATCH = 64


def barrier(core) -> dict:
    core.submit(b"p", 1, Checkpoint(), 0)
    (_, raw), = core.commit()
    return decode_reply(raw)[1]


def one_run(records: int, topics: int) -> float:
    """CPU us per record of one checkpoint over `records` freshly written records."""
    data_dir = tempfile.mkdtemp(prefix="topics-checkpoint-bench-")
    try:
        prepare_layout(RealFs(), data_dir, 1)
        core, _ = open_core(data_dir)
        for t in range(topics):
            call(core, PutTopic(f"t{t}", {"durability": "disk"}))
        for i in range(records // BATCH):
            call(core, Append(f"t{i % topics}", [RECORD] * BATCH))
        reply = barrier(core)
        checkpointer = Checkpointer(RealFs(), data_dir)
        t0 = time.process_time()
        checkpointer.checkpoint({reply["group"]: (reply["idx"], reply["offset"])},
                                accounting=reply["accounting"])
        seconds = time.process_time() - t0
        checkpointer.close()
        core.close()
        return seconds / (records // BATCH * BATCH) * 1e6
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--topics", type=int, default=4)
    args = parser.parse_args()
    if args.runs < 1 or args.records < BATCH or args.topics < 1:
        parser.error("--runs and --topics must be at least 1, --records at least 64")
    results = [one_run(args.records, args.topics) for _ in range(args.runs)]
    print(f"checkpoint of {args.records} records over {args.topics} topics: "
          f"{statistics.median(results):.2f} us CPU per record (median of {args.runs}; "
          f"runs {', '.join(f'{r:.2f}' for r in results)})")


if __name__ == "__main__":
    main()
