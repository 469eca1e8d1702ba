"""Power loss of every replica at once, for a `disk` and a `memory` topic (issue 34;
docs/CLUSTER.md 12).

Three nodes on LazyFS (one shard each), a `disk` and a `memory` topic of three copies
(`min_isr` 2) written with `acks: all`; no background flush (TOPICS_DISK_FLUSH_INTERVAL_MS
is a minute), so a replica syncs its WAL only when the disk topic takes a head reservation
(the memory topic's records ride along). Then every node is killed -9 at once and LazyFS
drops what none of them synced; the disk topic's two followers start first, so one of them
is elected, then its old leader; more writes follow on both topics.

Asserted, each class's promise (docs/DURABILITY.md 3) on a cluster, by tools/jepsen/oracle.py:
- disk: acked records may be lost only as a tail; a seq once acked is never acked again
  for another record (no seq is issued again); the copies end identical; every acked
  write after the power loss is on every copy. Before the fix the follower elected had
  never synced a reservation, issued the lost seqs again, and the returning old leader
  kept records at seqs its new leader had given to others;
- memory: the same, except that a lost seq may be issued again after the power loss: a
  record acked before it is on every copy at its seq, or lost as part of a tail and then
  absent or replaced by one stored after the power loss; nothing invented, nothing moved.

Method: Node and ZooKeeper on loopback (no partitions needed), LazyFsMount per node,
LedgerWriter, the copies read offline (tools/testing/replica_copy.py) and checked by
tools/jepsen/oracle.py.
"""

from __future__ import annotations

import time

import pytest

from tools.jepsen import oracle
from tools.testing.cluster_harness import (
    LedgerWriter, cluster_env, copies, replication, wait_caught_up, wait_isr,
)
from tools.testing.lazy_fs import LazyFsMount, lazyfs_usable
from tools.testing.node_harness import Node, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.skipif(lazyfs_usable() is not None,
                                 reason=str(lazyfs_usable()))]

SHARDS = 1
DISK = "dpl"
TOPICS = {DISK: "disk", "mpl": "memory"}
ENV = {"TOPICS_DISK_FLUSH_INTERVAL_MS": "60000", "TOPICS_WAL_FILE_BYTES": str(1 << 20)}


def test_power_loss_of_every_replica_loses_only_a_tail_and_never_reissues_a_seq(
        tmp_path, zk_connect):
    mounts = {nid: LazyFsMount(str(tmp_path / nid / "backing"), str(tmp_path / nid / "mnt"),
                               "128mb") for nid in ("a", "b", "c")}
    nodes: dict[str, Node] = {}
    writers: list[LedgerWriter] = []
    try:
        for nid, mount in mounts.items():
            mount.mount()
            nodes[nid] = Node(mount.node_data_dir(str(tmp_path / nid / "run")), SHARDS,
                              cluster_env(zk_connect, nid, **ENV),
                              log_path=str(tmp_path / f"{nid}.log")).start(timeout_s=60)
        admin = nodes["a"].client(request_timeout_ms=5000)
        for topic, durability in TOPICS.items():
            admin.put_topic(topic, durability=durability, replication_factor=3, min_isr=2)
        leaders = {topic: wait_isr(nodes["a"], topic, 3)["leader"] for topic in TOPICS}
        first = {topic: LedgerWriter(nodes[leaders[topic]], topic, retry_deadline_ms=2000)
                 for topic in TOPICS}
        writers += first.values()
        for writer in first.values():
            writer.start()
        wait_for(lambda: min(len(w.ack_log) for w in first.values()) >= 600, 60,
                 "600 acked writes on each topic")
        for node in nodes.values():                    # the power goes, everywhere at once
            node.kill_group()
        for mount in mounts.values():
            mount.power_loss()
        lost_at = time.monotonic()     # no node runs: an ack before this was sent before
        for writer in first.values():
            writer.halt.set()
            writer.join(30)
        followers = [nid for nid in sorted(nodes) if nid != leaders[DISK]]
        for nid in followers + [leaders[DISK]]:        # a follower is elected
            restart(nodes[nid])
        second = {}
        for topic in TOPICS:
            wait_isr(nodes[followers[0]], topic, 3, timeout_s=60)
            second[topic] = LedgerWriter(nodes[followers[0]], topic, retry_deadline_ms=5000)
            second[topic].numbered_from = first[topic].sent
        writers += second.values()
        for writer in second.values():
            writer.start()
        wait_for(lambda: min(len(w.ack_log) for w in second.values()) >= 100, 60,
                 "100 acked writes on each topic after")
        for topic, writer in second.items():
            writer.halt.set()
            writer.join(30)
            wait_caught_up(nodes[followers[0]], topic)
        for node in nodes.values():
            node.stop()
        for topic, durability in TOPICS.items():
            verdict = oracle.check_topic(durability, Combined(first[topic], second[topic]),
                                         None, copies(nodes, SHARDS, topic), [lost_at])
            assert not verdict.violations, f"{topic}: " + "\n".join(verdict.violations)
    finally:
        for writer in writers:
            writer.halt.set()
        for node in nodes.values():
            node.stop()
        for mount in mounts.values():
            mount.unmount()


def restart(node: Node) -> None:
    """Start again on the same data dir; a start is refused while ZooKeeper still holds the
    old session (1 s), so it is tried until it holds."""
    def started():
        try:
            node.start(timeout_s=60)
            return True
        except AssertionError:
            node.forget()
            return False
    wait_for(started, 60, "the node to start again", interval_s=0.5)


class Combined:
    """The two writers' ledgers as one writer's (the second numbers its records on from
    the first's last)."""

    def __init__(self, first: LedgerWriter, second: LedgerWriter):
        self.ack_log = first.ack_log + second.ack_log
        self.ack_times = first.ack_times + second.ack_times
        self.in_doubt = first.in_doubt + second.in_doubt
        self.sent = max(first.sent, second.sent)
