"""The cluster under test, each member in its own network namespace on one bridge.

ZooKeeper, every node and this process (its writers and readers: the clients) live in
namespaces a NetLab made (tools/testing/net_lab.py): a partition cuts real TCP links, and
nothing leaves the lab. Each node's data dir sits on the storage its faults need:

- on LazyFS (power_loss): un-fsynced writes vanish at a power loss;
- on a small loop-mounted ext4 (disk_full): the last node, when disk_full is drawn (LazyFS
  cannot carry it: it reports an fsync done even when its backing disk is full, so a power
  loss there would blame the engine for LazyFS's lie);
- on the temp dir's own file system otherwise.

Every node serves on its namespace's address, HTTP on 8080 and ZeroMQ on 5555, the same at
every restart. The nodes run with TOPICS_ALLOW_INSECURE_NO_AUTH=1: their network is the
lab's private bridge.
"""

from __future__ import annotations

import os
import shutil
import string
import tempfile
import time

from tools.cluster_crashtest.cluster_run import (
    MIN_ISR, REPLICATION_FACTOR, SESSION_TIMEOUT_MS, SETUP_TIMEOUT_S, START_TIMEOUT_S,
    ClusterRun,
)
from tools.jepsen.observers import Reader
from tools.testing.cluster_harness import LedgerWriter, cluster_env, cluster_unhealed
from tools.testing.lazy_fs import LazyFsMount
from tools.testing.net_lab import NetLab
from tools.testing.node_harness import Node, shard_of_name, wait_for
from tools.testing.small_disk import SmallDisk
from tools.testing.zookeeper_server import ZooKeeperServer

HTTP_PORT, ZMQ_PORT, ZK_PORT = 8080, 5555, 2181
WAL_FILE_BYTES = 1024 * 1024     # rotations come every second or so: a full disk meets them
DISK_FLUSH_INTERVAL_MS = 1000   # a second of disk and memory writes unsynced: what a power
                                # loss can take (the default, 10 ms, leaves it almost nothing)
SMALL_DISK_MIB = 512
LAZYFS_CACHE = "512mb"   # above what a node keeps in a 30-minute run (no eviction)
DURABILITIES = ("fsync", "disk", "memory")


def topic_names(count: int, shards: int) -> dict[str, str]:
    """{topic: durability}: fsync0, disk1, memory2, written with acks=all, and leader3
    (fsync) with acks=leader, whose losses the oracle counts (what that mode does not
    guarantee); then again from fsync4. A disk or memory topic is named on a shard no fsync
    topic is on, where there is one (memory2a: memory2 would share the fsync topics'
    shard), since an fsync write syncs its shard's whole WAL and would leave a power loss
    almost nothing of theirs to take."""
    kinds = [("leader", "fsync") if i % 4 == 3 else (DURABILITIES[i % 4],) * 2
             for i in range(count)]
    names = {f"{prefix}{i}": durability for i, (prefix, durability) in enumerate(kinds)}
    synced = {shard_of_name(name, shards) for name, d in names.items() if d == "fsync"}
    if len(synced) == shards:
        return names
    return {_off(name, synced, shards) if d != "fsync" else name: d for name, d in names.items()}


def _off(name: str, synced: set[int], shards: int) -> str:
    """`name`, or the first of name + a, b, ... that no shard in `synced` owns."""
    for suffix in ("", *string.ascii_lowercase):
        if shard_of_name(name + suffix, shards) not in synced:
            return name + suffix
    return name


class LabCluster(ClusterRun):
    def __init__(self, node_count: int, shards: int, topic_count: int, kinds: list[str],
                 base: str | None = None, keep: bool = False, out=print):
        given = base is not None
        base = base or tempfile.mkdtemp(prefix="jepsen_")
        super().__init__(node_count, shards, topic_count, base, keep, out)
        self.keep = keep or given
        self.topics = topic_names(topic_count, shards)
        self.leader_acked = {topic for topic in self.topics if topic.startswith("leader")}
        self.lab = NetLab(f"tj{os.getpid() % 100_000}",
                          ["zk", *(f"n{i}" for i in range(1, node_count + 1)), "cl"])
        self.lazy: dict[str, LazyFsMount] = {}
        self.disks: dict[str, SmallDisk] = {}
        self.readers: dict[str, Reader] = {}
        self.kinds = kinds
        self.events: list[tuple[float, str]] = []     # (time.monotonic(), what) of faults
        self.all_power_losses: list[float] = []        # time.monotonic() of each
        self.fills = 0                                  # disk_full faults so far
        self.every_node_power_share = 0.35     # of power losses, those of every node at once

    # --- start --------------------------------------------------------------------------

    def start(self) -> "LabCluster":
        self.lab.create()
        self.lab.enter("cl")     # before any thread: every client is born in the lab
        os.makedirs(f"{self.base}/zookeeper", exist_ok=True)
        self.zk = ZooKeeperServer(f"{self.base}/zookeeper", ZK_PORT, self.lab.address("zk"),
                                  self.lab.enter_argv("zk"))
        self.zk.start()
        for i in range(1, self.node_count + 1):
            nid = f"n{i}"
            self.front_ports[nid] = ZMQ_PORT
            self.nodes[nid] = Node(self._data_dir(nid, i == self.node_count), self.shards,
                                   self.node_env(nid), log_path=f"{self.base}/{nid}.log",
                                   host=self.lab.address(nid),
                                   argv_prefix=self.lab.enter_argv(nid))
            self.nodes[nid].start(timeout_s=START_TIMEOUT_S)
        wait_for(self._all_registered, SETUP_TIMEOUT_S, "every node registered", 0.1)
        client = self.nodes["n1"].client(request_timeout_ms=5000)
        for topic, durability in self.topics.items():
            client.put_topic(topic, durability=durability, min_isr=MIN_ISR,
                             replication_factor=REPLICATION_FACTOR)
        wait_for(lambda: cluster_unhealed(self.nodes, list(self.topics)) is None,
                 SETUP_TIMEOUT_S, "every topic's ISR full", 0.2)
        ids = sorted(self.nodes)
        for i, topic in enumerate(self.topics):     # each writer through another node
            acks = "leader" if topic in self.leader_acked else "all"
            self.writers[topic] = LedgerWriter(self.nodes[ids[i % len(ids)]], topic, acks)
            self.readers[topic] = Reader(self.nodes, topic)
        for thread in (*self.writers.values(), *self.readers.values()):
            thread.start()
        return self

    def _data_dir(self, nid: str, last: bool) -> str:
        if "disk_full" in self.kinds and (last or "power_loss" not in self.kinds):
            disk = SmallDisk(f"{self.base}/{nid}/disk.img", f"{self.base}/{nid}/disk",
                             SMALL_DISK_MIB)
            self.disks[nid] = disk.mount()
            return f"{disk.mount_dir}/data"
        if "power_loss" in self.kinds:
            mount = LazyFsMount(f"{self.base}/{nid}/backing", f"{self.base}/{nid}/mnt",
                                LAZYFS_CACHE)
            self.lazy[nid] = mount.mount()
            return mount.node_data_dir(f"{self.base}/{nid}/run")
        return f"{self.base}/{nid}/data"

    def node_env(self, nid: str) -> dict:
        return cluster_env(self.zk.connect, nid, SESSION_TIMEOUT_MS,
                           TOPICS_HOST=self.lab.address(nid), TOPICS_PORT=str(HTTP_PORT),
                           TOPICS_ZMQ_PORT=str(ZMQ_PORT), TOPICS_ALLOW_INSECURE_NO_AUTH="1",
                           TOPICS_WAL_FILE_BYTES=str(WAL_FILE_BYTES),
                           TOPICS_DISK_FLUSH_INTERVAL_MS=str(DISK_FLUSH_INTERVAL_MS))

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))

    # --- the end -------------------------------------------------------------------------

    def stop_readers(self, timeout_s: float = 20) -> list[str]:
        for reader in self.readers.values():
            reader.halt.set()
        deadline = time.monotonic() + timeout_s
        for reader in self.readers.values():
            reader.join(max(0.1, deadline - time.monotonic()))
        return [topic for topic, reader in self.readers.items() if reader.is_alive()]

    def _report_dead(self, nid: str, mount: LazyFsMount) -> None:
        """A LazyFS that died leaves its node's data dir unreadable ("transport endpoint is
        not connected"); its log goes with its control dir at the unmount, so show its end."""
        code = mount.proc.poll() if mount.proc is not None else None
        if code is not None:
            self.out(f"LazyFS of {nid} exited with {code}; its log ends:\n"
                     f"{mount.log()[-3000:]}")

    def close(self) -> None:
        """Everything ClusterRun.close stops, then the mounts and the namespaces, then the
        temp dir (unless kept)."""
        for reader in self.readers.values():
            reader.halt.set()
        keep, self.keep = self.keep, True       # the files go only once unmounted
        try:
            super().close()
        finally:
            self.keep = keep
            for disk in self.disks.values():
                disk.free()
                disk.unmount()
            for nid, mount in self.lazy.items():
                self._report_dead(nid, mount)
                mount.unmount()
            self.lab.destroy()
            if not keep:
                shutil.rmtree(self.base, ignore_errors=True)
