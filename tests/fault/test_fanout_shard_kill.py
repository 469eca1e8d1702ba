"""Fault: SIGKILL of a watched topic's shard under 1000 SSE watchers (issue 32).

    fault id     what strikes                                   when
    F-1000       SIGKILL of the shard of the watched topic      mid-way through the writes
                 (which also holds about half the sessions)

Method: one fsync topic; 1000 watch streams on it (tools/testing/sse_crowd.py: one asyncio
task each, resuming after a break with Last-Event-ID, or with a new session from the cursor
it holds when its session died with the shard); one appender (ZeroMQ client, idempotent
retries) writing batches of five until 60 are acked, the shard killed after the 20th.

Asserted for every watcher: it holds exactly the acked records, in seq order, each once,
with the data acked, the ones acked after the kill included; no tombstone or topic-deleted
event. (A stream outlives its session's shard: the gateway holds it and its cursor, and
reads on from there once the topic's shard is back; a stream that did break resumes from
its Last-Event-ID.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from tools.testing.node_harness import names_on, wait_for
from tools.testing.sse_crowd import Crowd, Watcher

pytestmark = [pytest.mark.timeout(180)]
WATCHERS, BATCHES, KILL_AFTER, BATCH = 1000, 60, 20, 5


class Appender(threading.Thread):
    """Writes KILL_AFTER batches, waits until the shard is killed, writes the rest (its
    retries ride out the restart)."""

    def __init__(self, node, topic: str):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.topic = topic
        self.acked: dict[int, dict] = {}
        self.error: BaseException | None = None
        self.halfway, self.killed = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            for n in range(BATCHES):
                if n == KILL_AFTER:
                    self.halfway.set()
                    self.killed.wait(60)
                batch = [{"data": {"n": n, "k": k}} for k in range(BATCH)]
                reply = self.client.append(self.topic, batch)
                self.acked.update(zip(reply["seqs"], (r["data"] for r in batch)))
        except BaseException as exc:        # reported by the test
            self.error = exc


async def watch_through_the_kill(node, topic: str, shard: int) -> tuple[list, Appender]:
    crowd = Crowd(node.http_port)
    watchers = [Watcher(f"w{k}", [topic], {"heartbeat_ms": 500}) for k in range(WATCHERS)]
    await asyncio.gather(*(crowd.session(w) for w in watchers))
    for watcher in watchers:
        crowd.start(watcher)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: wait_for(
        lambda: all(w.streams for w in watchers), 60, "every stream to open"))
    appender = Appender(node, topic)
    appender.start()
    await loop.run_in_executor(None, appender.halfway.wait, 60)
    pid = node.status()["shards"][shard]["pid"]
    os.kill(pid, signal.SIGKILL)
    appender.killed.set()
    await loop.run_in_executor(None, appender.join, 120)
    assert node.status()["shards"][shard]["pid"] != pid, "the shard was not restarted"
    assert appender.error is None, appender.error
    want = len(appender.acked)
    await loop.run_in_executor(None, lambda: wait_for(
        lambda: all(len(w.records.get(topic, [])) >= want for w in watchers), 90,
        "every watcher to catch up"))
    await crowd.stop()
    return watchers, appender


def test_a_shard_killed_under_a_thousand_watchers_loses_no_acked_record(make_node):
    node = make_node(env={"TOPICS_TEST_MIN_HEARTBEAT_MS": "200",
                          "TOPICS_MAX_SSE_CONNECTIONS": "2000"})
    topic = names_on(0, 1, prefix="storm")[0]
    client = node.client()
    client.put_topic(topic, durability="fsync")
    watchers, appender = asyncio.run(watch_through_the_kill(node, topic, 0))
    acked = sorted(appender.acked.items())
    assert len(acked) == BATCHES * BATCH
    for watcher in watchers:
        assert watcher.records[topic] == acked, watcher.name
        assert watcher.other_events == [], (watcher.name, watcher.other_events[:3])
