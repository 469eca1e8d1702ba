"""The cluster under test: one ZooKeeper and N nodes in a temp dir, the replicated topics and
their acks=all writers; and `close()`, which stops everything it started and removes the
temp dir, whatever state a fault left behind (a paused node, ZooKeeper down).

Each node keeps its id, data dir and front port (TOPICS_ZMQ_PORT) across restarts, so a
writer's client, which knows one front, finds its node again after a kill -9.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time

from tools.testing.cluster_harness import (
    LedgerWriter, cluster_env, cluster_unhealed, cluster_view,
)
from tools.testing.node_harness import Node, wait_for
from tools.testing.zookeeper_server import ZooKeeperServer, free_port

SESSION_TIMEOUT_MS = 1000
REPLICATION_FACTOR = 3
MIN_ISR = 2
START_TIMEOUT_S = 120      # a node's start on a busy 2-core machine
SETUP_TIMEOUT_S = 120


class ClusterRun:
    def __init__(self, node_count: int = 3, shards: int = 2, topic_count: int = 2,
                 base: str | None = None, keep: bool = False, out=print):
        self.node_count, self.shards = node_count, shards
        self.keep = keep or base is not None
        self.base = base or tempfile.mkdtemp(prefix="cluster-crashtest-")
        os.makedirs(self.base, exist_ok=True)
        self.out = out
        self.zk: ZooKeeperServer | None = None
        self.nodes: dict[str, Node] = {}
        self.front_ports: dict[str, int] = {}
        self.writers: dict[str, LedgerWriter] = {}
        # topic name -> durability: fsync, disk, fsync, ... (one of each from two topics)
        self.topics = {f"{d}{i}": d for i, d in
                       ((i, ("fsync", "disk")[i % 2]) for i in range(topic_count))}
        self.paused: set[str] = set()

    # --- start --------------------------------------------------------------------------

    def start(self) -> "ClusterRun":
        os.makedirs(f"{self.base}/zookeeper", exist_ok=True)
        self.zk = ZooKeeperServer(f"{self.base}/zookeeper")    # known before it starts:
        self.zk.start()                                       # close() stops it
        for i in range(1, self.node_count + 1):
            nid = f"n{i}"
            self.front_ports[nid] = free_port()
            self.nodes[nid] = Node(f"{self.base}/{nid}/data", self.shards, self.node_env(nid),
                                   log_path=f"{self.base}/{nid}.log")
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
            self.writers[topic] = LedgerWriter(self.nodes[ids[i % len(ids)]], topic)
            self.writers[topic].start()
        return self

    def node_env(self, nid: str) -> dict:
        return cluster_env(self.zk.connect, nid, SESSION_TIMEOUT_MS,
                           TOPICS_ZMQ_PORT=str(self.front_ports[nid]))

    def _all_registered(self) -> bool:
        for node in self.nodes.values():
            view = cluster_view(node)
            if view is None or sorted(view["nodes"]) != sorted(self.nodes) or not all(
                    info.get("shards") for info in view["nodes"].values()):
                return False
        return True

    def writer_entry(self, topic: str) -> str:
        return sorted(self.nodes)[list(self.topics).index(topic) % len(self.nodes)]

    # --- faults' building blocks ---------------------------------------------------------

    def restart_node(self, nid: str, timeout_s: float = START_TIMEOUT_S) -> float:
        """Start the (dead) node `nid` again on its data dir, id and front port; retried
        until `timeout_s` (a start can be refused while ZooKeeper still holds the old
        registration). Seconds until it was ready."""
        node, started = self.nodes[nid], time.monotonic()
        while True:
            try:
                node.start(timeout_s=START_TIMEOUT_S)
                return time.monotonic() - started
            except AssertionError as error:
                if node.proc.poll() is None:
                    node.kill_group()        # hung before ready: kill and forget it
                else:
                    node.forget()
                if time.monotonic() - started > timeout_s:
                    raise AssertionError(f"{nid} did not start again: {error}") from None
                self.out(f"    restart of {nid} failed, trying again: {str(error)[-200:]}")
                time.sleep(1)

    def signal_node(self, nid: str, signum: int) -> None:
        os.killpg(self.nodes[nid].proc.pid, signum)
        if signum == signal.SIGSTOP:
            self.paused.add(nid)
        elif signum == signal.SIGCONT:
            self.paused.discard(nid)

    # --- the end -------------------------------------------------------------------------

    def stop_writers(self, timeout_s: float = 40) -> list[str]:
        """Halt every writer; the topics whose writer thread is still running after
        `timeout_s` (a hung client)."""
        for writer in self.writers.values():
            writer.halt.set()
        deadline = time.monotonic() + timeout_s
        for writer in self.writers.values():
            writer.join(max(0.1, deadline - time.monotonic()))
        return [topic for topic, writer in self.writers.items() if writer.is_alive()]

    def stop_nodes(self) -> dict[str, int]:
        """Stop every node (SIGTERM, then the group's SIGKILL); exit codes by node id."""
        codes = {}
        for nid, node in self.nodes.items():
            if node.proc is not None and node.proc.returncode is None:
                if nid in self.paused:
                    self.signal_node(nid, signal.SIGCONT)
                codes[nid] = node.stop()
        return codes

    def close(self) -> None:
        """Stop whatever still runs and remove the temp dir (unless kept); safe to call in
        any state, twice too. Nodes get SIGTERM, then their group SIGKILL, without closing
        the clients of writers that may still be inside a request (their threads die with
        the process)."""
        for writer in self.writers.values():
            writer.halt.set()
        for nid in list(self.paused):
            try:
                self.signal_node(nid, signal.SIGCONT)
            except ProcessLookupError:
                self.paused.discard(nid)
        for node in self.nodes.values():
            if node.proc is not None and node.proc.returncode is None:
                node.stop(timeout_s=10)
        if self.zk is not None:
            self.zk.stop()
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)
