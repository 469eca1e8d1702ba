"""Queues through the ZeroMQ clients against a real node, and durable leases across a
kill -9 of the owning shard process (issue 16 parts 1-2).

Method: fresh nodes (supervisor + shards as real processes); the crash is SIGKILL of the
shard that owns the queue, and the supervisor restarts it (its recovery replays the WAL).
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from topics_actors.client import AsyncClient
from topics_actors.topic_identity import shard_of_name
from tests.support import wait_for

pytestmark = pytest.mark.timeout(90)


def test_client_queue_methods(make_node):
    node = make_node(shards=2)
    c = node.client()
    c.put_topic("jobs", type="queue")
    c.append("jobs", [{"data": {"n": 1}, "tag": "a", "meta": {"m": 1}}, {"data": 2}])
    claimed = c.claim("jobs", "w", max=5, lease_ms=60_000)
    first = claimed["claimed"][0]
    assert (claimed["count"], first["$seq"], first["lease_id"], first["data"]) == \
        (2, 1, "lease_1", {"n": 1})
    assert (first["$tag"], first["meta"], first["deliveries"]) == ("a", {"m": 1}, 1)
    assert c.extend("jobs", "w", [2], 5000)["extended_seqs"] == [2]
    assert c.nack("jobs", "w", [2], lease_ids=["lease_2"])["nacked_seqs"] == [2]
    assert c.ack("jobs", "w", [1, 2])["skipped"] == [2]
    assert c.get_topic("jobs")["queue"] == {"ready": 1, "in_flight": 0, "dead_lettered": 0}

    async def run():
        client = AsyncClient(node.endpoint)
        try:
            job = (await client.claim("jobs", "v"))["claimed"][0]
            assert (job["$seq"], job["deliveries"]) == (2, 2)
            return await client.ack("jobs", "v", [2], [job["lease_id"]])
        finally:
            await client.close()
    assert asyncio.run(run())["acked_seqs"] == [2]


def test_durable_leases_survive_a_kill_of_the_shard(make_node):
    node = make_node(shards=2)
    c = node.client(retry_deadline_ms=30_000)
    victim = shard_of_name("dq", 2)
    mq = next(f"mq{i}" for i in range(100) if shard_of_name(f"mq{i}", 2) == victim)
    for name, durable in (("dq", True), (mq, False)):
        c.put_topic(name, type="queue", leases_durable=durable, durability="fsync")
        c.append(name, [{"data": n} for n in range(1, 5)])
        c.claim(name, "w", max=3, lease_ms=600_000)
        assert c.ack(name, "w", [1])["acked"] == 1
    pid = node.shard_pid(victim)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: node.status()["shards"][victim]["pid"] not in (pid, 0)
             and node.status()["shards"][victim]["state"] == "ready", 30, "a restart")
    assert c.get_topic("dq")["queue"] == {"ready": 1, "in_flight": 2, "dead_lettered": 0}
    assert [j["$seq"] for j in c.claim("dq", "x", max=5)["claimed"]] == [4]
    assert c.ack("dq", "w", [2, 3])["acked_seqs"] == [2, 3]      # the leases were kept
    assert c.get_topic(mq)["queue"] == {"ready": 3, "in_flight": 0, "dead_lettered": 0}
    assert [j["$seq"] for j in c.claim(mq, "x", max=5)["claimed"]] == [2, 3, 4]


def test_a_move_to_another_shard_survives_both_shards_dying(make_node):
    """The dead-letter shard is stopped when the job is marked moving, then the queue's
    shard is killed: after both restart, the move completes (the mark is logged)."""
    node = make_node(shards=2, env={"TOPICS_HEARTBEAT_TIMEOUT_MS": "1500"})
    c = node.client(retry_deadline_ms=30_000)
    queue = next(f"q{i}" for i in range(100) if shard_of_name(f"q{i}", 2) == 0)
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    c.put_topic(queue, type="queue", max_deliveries=1, dead_letter=dead)
    c.append(queue, [{"data": "job"}])
    c.claim(queue, "w", lease_ms=100)
    wait_for(lambda: c.get_topic(queue)["queue"]["ready"] == 1, 10, "the lease to expire")
    stopped = node.shard_pid(1)
    os.kill(stopped, signal.SIGSTOP)
    assert c.claim(queue, "w")["count"] == 0
    assert c.get_topic(queue)["queue"] == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    killed = node.shard_pid(0)
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: all(s["state"] == "ready" and s["pid"] not in (stopped, killed, 0)
                         for s in node.status()["shards"]), 30, "both shards back")
    wait_for(lambda: c.get_topic(queue)["queue"]["dead_lettered"] == 1, 30, "the move")
    assert c.get_topic(queue)["count"] == 0
    assert [r["data"] for r in c.diff(dead)["records"]] == ["job"]
