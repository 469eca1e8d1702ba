"""Fault: the data dir's disk fills up under load (docs/FAULT_TESTING.md "Full disk").

Fault D-FULL: a node (2 shards, 1 MiB WAL files) on a 64 MiB loop-mounted ext4
(tools/testing/small_disk.py); one writer per topic (an fsync topic on shard 0, a disk topic
on shard 1) and a filler appending 256 KiB batches to a topic on each shard, so both WALs
rotate every few appends (DiskFiller, tools/testing/disk_filler.py); then a ballast file takes
every free block.

Asserted:
- writers get a clear error, `insufficient_storage` (HTTP 507, over ZeroMQ and HTTP), and
  no other;
- reads keep working while the disk is full (diff, GET of the topic, /v0/ready);
- once the ballast is gone, every writer is acked again, with no restart of the node or of
  any shard (same pids, same incarnations);
- nothing acked is lost and no refused write shows: after a clean restart each topic holds
  every acked record at its seq, and none of the numbers whose append was refused.

Method: Node (tools/testing/node_harness.py), LedgerWriter (tools/testing/cluster_harness.py:
every ack, every refusal by code), records read back with diff from seq 0.
"""

from __future__ import annotations

import time

import pytest

from tools.testing.cluster_harness import LedgerWriter, read_numbers
from tools.testing.disk_filler import DiskFiller
from tools.testing.node_harness import Node, names_on, wait_for
from tools.testing.small_disk import SmallDisk, usable

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(usable() is not None, reason=str(usable()))]

FULL = "insufficient_storage"


def test_a_full_disk_refuses_writes_clearly_and_they_resume_without_a_restart(tmp_path):
    topics = {"fsync": names_on(0, 1, prefix="dff")[0], "disk": names_on(1, 1, prefix="dfd")[0]}
    fill_topics = [names_on(0, 1, prefix="fill")[0], names_on(1, 1, prefix="fill")[0]]
    with SmallDisk(str(tmp_path / "disk.img"), str(tmp_path / "disk"), 64) as disk:
        node = Node(f"{disk.mount_dir}/data", 2, {"TOPICS_WAL_FILE_BYTES": str(1 << 20)},
                    log_path=str(tmp_path / "node.log"))
        workers: list = []
        try:
            node.start(timeout_s=60)
            admin = node.client()
            for durability, topic in topics.items():
                admin.put_topic(topic, durability=durability)
            for topic in fill_topics:
                admin.put_topic(topic, durability="disk")
            writers = {d: LedgerWriter(node, t, retry_deadline_ms=2000)
                       for d, t in topics.items()}
            filler = DiskFiller(node, fill_topics)
            workers = [*writers.values(), filler]
            for worker in workers:
                worker.start()
            wait_for(lambda: all(len(w.ack_log) > 20 for w in writers.values()), 30,
                     "acks before the fill")
            before = node.status()
            disk.fill()
            wait_for(lambda: all(w.errors for w in writers.values()), 60,
                     "every writer refused by the full disk")
            for writer in writers.values():
                assert set(writer.errors) == {FULL}, writer.errors
            assert set(filler.errors) <= {FULL}, filler.errors
            body = {"records": [{"data": {"pad": "y" * 16_000}}] * 16}
            answers = [node.http("POST", f"/v0/topics/{fill_topics[0]}", body)
                       for _ in range(5)]
            refused = [a for a in answers if a.status == 507]
            assert refused and all(a.status in (200, 507) for a in answers)
            assert refused[0].json()["error"]["code"] == FULL          # over HTTP: 507
            for topic in topics.values():         # reads go on while the disk is full
                assert admin.diff(topic, from_seq=0, limit=10)["records"]
                assert admin.get_topic(topic)["head_seq"] > 0
            assert node.http("GET", "/v0/ready").status == 200
            disk.free()
            freed = time.monotonic()
            wait_for(lambda: all(w.last_ack_s > freed for w in writers.values()), 60,
                     "every writer acked again once space returned")
            after = node.status()
            assert [(s["pid"], s["incarnation"]) for s in after["shards"]] == [
                (s["pid"], s["incarnation"]) for s in before["shards"]], "a shard restarted"
            halt(workers)
            node.stop()
            node.start(timeout_s=60)
            client = node.client()
            for durability, writer in writers.items():
                found, _ = read_numbers(client, topics[durability])
                lost = [(s, n) for s, n in writer.ack_log if found.get(s) != n]
                assert not lost, f"{durability}: acked records lost: {lost[:5]}"
                shown = set(found.values()) & set(writer.in_doubt)
                assert not shown, f"{durability}: refused writes stored: {sorted(shown)[:5]}"
        finally:
            halt(workers)
            node.stop()


def halt(workers: list) -> None:
    for worker in workers:
        worker.halt.set()
    for worker in workers:
        worker.join(15)
