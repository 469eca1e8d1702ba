"""Pieces shared by the replication tests and the cluster crash tool: a node's cluster
settings, a topic's replication view through a node, and a writer that remembers exactly
which records were acknowledged (the oracle: every one must survive)."""

from __future__ import annotations

import threading

from tools.testing.node_harness import wait_for
from tools.testing.replica_copy import topic_copy
from topics_actors.errors import TopicsError


def cluster_env(zk_connect: str, node_id: str, session_ms: int = 1000, **extra) -> dict:
    return {"TOPICS_ZK": zk_connect, "TOPICS_NODE_ID": node_id,
            "TOPICS_ZK_SESSION_TIMEOUT_MS": str(session_ms), "TOPICS_GATEWAY_WORKERS": "1",
            **extra}


def replication(node, topic: str) -> dict | None:
    """The topic's `replication` member as `node` answers it (None: no answer)."""
    try:
        reply = node.http("GET", f"/v0/topics/{topic}")
    except OSError:
        return None
    return reply.json().get("replication") if reply.status == 200 else None


def wait_isr(node, topic: str, size: int, timeout_s: float = 30) -> dict:
    return wait_for(lambda: (r := replication(node, topic)) and len(r["isr"]) == size and r,
                    timeout_s, f"an ISR of {size}")


def wait_caught_up(node, topic: str, timeout_s: float = 60) -> dict:
    """Until the leader (through `node`) sees every follower at its log end."""
    return wait_for(lambda: (r := replication(node, topic)) and r.get("followers") is not None
                    and all(f["lag"] == 0 for f in r["followers"].values()) and r,
                    timeout_s, "followers caught up")


def copies(nodes: dict, shards: int, topic: str) -> dict:
    """Each stopped node's copy of `topic` ({seq: envelope}, None: no copy), by node id."""
    return {nid: topic_copy(node.data_dir, shards, topic) for nid, node in nodes.items()}


class Writer(threading.Thread):
    """Appends numbered records with `acks` until halted; remembers what was acked
    ({seq: number}); a failed append is not acked (it may or may not be stored)."""

    def __init__(self, node, topic: str, acks: str = "all", **client_options):
        super().__init__(daemon=True)
        client_options.setdefault("request_timeout_ms", 2000)
        client_options.setdefault("retry_deadline_ms", 20_000)
        self.client = node.client(**client_options)
        self.topic, self.acks = topic, acks
        self.acked: dict[int, int] = {}
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        number = 0
        while not self.halt.is_set():
            number += 1
            try:
                reply = self.client.append(self.topic, [{"data": {"n": number}}],
                                           acks=self.acks)
            except TopicsError:
                self.failures += 1
                continue
            self.acked[reply["first_seq"]] = number

    def stop(self, timeout_s: float = 30) -> None:
        self.halt.set()
        self.join(timeout_s)
