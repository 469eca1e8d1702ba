"""Fault: SIGKILL of one shard process under concurrent fsync-class writes.

Fault K-SHARD-1: SIGKILL a shard while 8 writers append fsync-class batches to 4 topics.
Asserted: every acked write survives with its seq and data; no record that was not acked;
seqs dense; the supervisor restarts the shard; topics on the other shard keep acking during
the outage; the clients carry on after the restart.

Method: writers are threads with their own blocking Client (retries on silence and
not_ready); each remembers what was acked. After the victim is back and has acked more,
the writers stop and every topic is read in full and compared with the acks.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tools.testing.node_harness import names_on
from tools.testing.node_harness import wait_for

pytestmark = pytest.mark.timeout(180)


class Writer(threading.Thread):
    def __init__(self, node, topic: str, ident: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.topic, self.writer_id, self.stop_event = topic, ident, stop
        self.acked: dict[int, dict] = {}
        self.ack_times: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop_event.is_set():
                batch = [{"data": {"w": self.writer_id, "n": n, "k": k}} for k in range(1 + n % 3)]
                reply = self.client.append(self.topic, batch)
                self.acked.update(zip(reply["seqs"], (r["data"] for r in batch)))
                self.ack_times.append(time.monotonic())
                n += 1
        except BaseException as exc:   # reported by the test, not swallowed
            self.error = exc


def read_all(client, topic: str) -> dict[int, dict]:
    records, cursor = {}, 0
    while True:
        page = client.diff(topic, from_seq=cursor, limit=1000)
        records.update((r["$seq"], r["data"]) for r in page["records"])
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return records


def test_sigkill_shard_under_fsync_writes(make_node):
    node = make_node(shards=2)
    victims, others = names_on(0, 2, "v"), names_on(1, 2, "o")
    admin = node.client()
    for topic in victims + others:
        admin.put_topic(topic, durability="fsync")
    stop = threading.Event()
    writers = [Writer(node, topic, i, stop) for i, topic in enumerate((victims + others) * 2)]
    for writer in writers:
        writer.start()
    wait_for(lambda: all(len(w.acked) >= 30 for w in writers), 60, "writers to get going")

    victim_pid = node.shard_pid(0)
    killed_at = time.monotonic()
    os.kill(victim_pid, signal.SIGKILL)
    back = wait_for(lambda: (lambda s: s if s["incarnation"] == 2 and s["state"] == "ready"
                             else None)(node.status()["shards"][0]), 60, "shard 0 restart")
    back_at = time.monotonic()
    counts = {id(w): len(w.acked) for w in writers}
    wait_for(lambda: all(len(w.acked) >= counts[id(w)] + 20 for w in writers), 60,
             "writers to continue after the restart")
    stop.set()
    for writer in writers:
        writer.join(60)
    assert [w.error for w in writers] == [None] * len(writers)

    assert back["pid"] != victim_pid
    assert "child=shard-00 state=down exit_code=-9" in node.log()
    for writer in writers:
        if writer.topic in others:
            during = [t for t in writer.ack_times if killed_at < t < back_at]
            assert during, f"{writer.topic} acked nothing while shard 0 was down"

    reader = node.client()
    for topic in victims + others:
        stored = read_all(reader, topic)
        acked = {}
        for writer in writers:
            if writer.topic == topic:
                acked.update(writer.acked)
        assert stored == acked, f"{topic}: stored records differ from acked writes"
        assert sorted(stored) == list(range(1, len(stored) + 1)), f"{topic}: seqs not dense"
        assert reader.get_topic(topic)["head_seq"] == len(stored)
