"""Fault: power loss of a node under load, on LazyFS (docs/FAULT_TESTING.md "Power loss").

Fault P-NODE: a node (3 shards) on LazyFS with one topic per durability class, each on its
own shard (fsync on 0, disk on 1, memory on 2) and written by its own thread, one record
per append; at a seeded random instant the node's whole process group is killed -9 and
LazyFS drops every byte that was not fsynced; the node starts again on what the disk kept.
TOPICS_DISK_FLUSH_INTERVAL_MS is 1000, so the disk and memory shards hold up to a second of
unsynced writes when the power goes (the test checks that LazyFS had bytes to drop, and
that its cache was not full: a full cache passes writes straight to disk). WAL files are
1 MiB, so their zeroed preallocation does not fill the cache.

Asserted, per class, storage.md's promise for a machine crash (docs/DURABILITY.md 3):
- fsync: every acked record is there, at its seq, with its payload;
- disk: only a tail of the acked records is lost (every acked record below the first lost
  one is there), the lost seqs read as a gap, and no seq is issued again: the head is at or
  above every acked seq and the next append lands above it;
- memory: nothing fabricated (every record is the one written at that seq), the survivors
  are a prefix of the acks, and no seq goes backwards below what survived: the next append
  lands at head + 1, above every surviving record (seqs of lost records may be issued
  again: the class takes no head reservations).

Method: Node (tools/testing/node_harness.py) on LazyFsMount (tools/testing/lazy_fs.py),
LedgerWriter (tools/testing/cluster_harness.py); the records are read back with diff from
seq 0 and compared with each writer's acks.
"""

from __future__ import annotations

import random
import time

import pytest

from tools.testing.cluster_harness import LedgerWriter, read_numbers
from tools.testing.lazy_fs import LazyFsMount, lazyfs_usable
from tools.testing.node_harness import Node, names_on

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(lazyfs_usable() is not None,
                                 reason=str(lazyfs_usable()))]

SHARDS = 3
CLASSES = ("fsync", "disk", "memory")


def test_power_loss_under_load_keeps_each_class_promise(tmp_path):
    rng = random.Random(34)
    topics = {durability: names_on(shard, 1, prefix=f"p{durability}", shards=SHARDS)[0]
              for shard, durability in enumerate(CLASSES)}
    with LazyFsMount(str(tmp_path / "backing"), str(tmp_path / "mnt"), "256mb") as mount:
        node = Node(mount.node_data_dir(str(tmp_path / "run")), SHARDS,
                    {"TOPICS_DISK_FLUSH_INTERVAL_MS": "1000",
                     "TOPICS_WAL_FILE_BYTES": str(1024 * 1024)},
                    log_path=str(tmp_path / "node.log"))
        writers: dict[str, LedgerWriter] = {}
        try:
            node.start(timeout_s=60)
            admin = node.client()
            for durability, topic in topics.items():
                admin.put_topic(topic, durability=durability)
            writers = {d: LedgerWriter(node, topic, retry_deadline_ms=1000)
                       for d, topic in topics.items()}
            for writer in writers.values():
                writer.start()
            time.sleep(rng.uniform(1.5, 3.0))     # the load runs: the instant is the fault
            node.kill_group()
            unsynced, usage = mount.unsynced_bytes(), mount.cache_usage()
            mount.power_loss()
            halt(writers)
            assert unsynced > 0, "LazyFS held nothing to drop: the fault tested nothing"
            assert usage < 90, f"LazyFS's cache was {usage}% full: writes went to disk"
            node.start(timeout_s=60)
            client = node.client()
            for durability, topic in topics.items():
                found, head = read_numbers(client, topic)
                next_seq = client.append(topic, [{"data": {"n": 0}}])["first_seq"]
                check_class(durability, writers[durability], found, head, next_seq)
        finally:
            halt(writers)
            node.stop()


def halt(writers: dict) -> None:
    for writer in writers.values():
        writer.halt.set()
    for writer in writers.values():
        writer.join(10)


def check_class(durability: str, writer: LedgerWriter, found: dict[int, int], head: int,
                next_seq: int) -> None:
    acked = writer.acked
    assert acked, f"{durability}: nothing was acked before the power loss"
    for seq, number in found.items():      # nothing fabricated, nothing moved
        assert acked.get(seq, number) == number and 1 <= number <= writer.sent, (
            f"{durability}: seq {seq} holds n={number}, acked n={acked.get(seq)}")
    lost = sorted(seq for seq in acked if seq not in found)
    if durability == "fsync":
        assert not lost, f"fsync: acked seqs {lost[:5]} lost ({len(lost)})"
        assert head >= max(acked) and next_seq == head + 1
        return
    kept_above = [seq for seq in found if lost and seq > lost[0] and seq in acked]
    assert not kept_above, (f"{durability}: acked seq {lost[0]} lost but later acked seq "
                            f"{kept_above[0]} kept: the loss is not a tail")
    assert next_seq == head + 1 and next_seq > max(found, default=0)
    if durability == "disk":
        assert head >= max(acked), f"disk: head {head} below acked seq {max(acked)}"
        assert next_seq > max(acked), "disk: a lost seq was issued again"
