"""Fault: SIGKILL of a shard and of the gateway while watchers stream (issue 15).

    fault id       what strikes                                      when
    W-SHARD-0      SIGKILL of shard 0 (a watched topic's shard, and   under appends to both
                   the home of some watch sessions)                   topics; twice a cycle
    W-SHARD-1      SIGKILL of shard 1 (the other topic's)             once
    W-GATEWAY      SIGKILL of the gateway serving every stream        once
    (the cycle runs twice; six times with TOPICS_TEST_HEAVY=1)

Method: two fsync topics, one per shard, each fed by an appender thread (ZeroMQ client,
idempotent retries: every record it wrote is eventually acked to it). Three watcher
threads each hold a watch session on both topics (POST /v0/watch, GET /v0/watch/:wid) and
keep the composite cursor of the last record they took. After every kill each watcher
resumes: a new GET with `Last-Event-ID` (a gateway kill breaks the streams by itself); a
session lost with its shard answers 404, and the watcher creates a new one from its cursor.

Asserted, per watcher and topic: after a resume, the records past its Last-Event-ID come
in seq order with no gap and none twice; a record at or before the Last-Event-ID may come
again (a dead gateway's cursor report can lag: docs/HTTP.md 7) but identical to the first
copy; no tombstone, no topic-deleted; at the end the watcher has exactly the acked
records (seq and data) and nothing else. Every watcher has resumed after every kill and
lost its session at least once.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tools.testing.kill_table import HEAL_TIMEOUT_S, kill_shard_at, process_killer
from tools.testing.node_harness import http_call, names_on, wait_for
from tools.testing.sse_reader import SseReader
from topics_actors.watch_cursor import encode_cursor

HEAVY = os.environ.get("TOPICS_TEST_HEAVY") == "1"
pytestmark = [pytest.mark.timeout(300 if HEAVY else 120)]
CYCLES = 6 if HEAVY else 2
PROGRESS = 30               # records each watcher takes between two kills


class Appender(threading.Thread):
    def __init__(self, node, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.topic, self.stop_event = topic, stop
        self.acked: dict[int, dict] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop_event.is_set():
                batch = [{"data": {"t": self.topic, "n": n, "k": k}} for k in range(1 + n % 3)]
                reply = self.client.append(self.topic, batch)
                self.acked.update(zip(reply["seqs"], (r["data"] for r in batch)))
                n += 1
                self.stop_event.wait(0.005)
        except BaseException as exc:        # reported by the test
            self.error = exc


class Watcher(threading.Thread):
    def __init__(self, node, name: str, topics: list[str], stop: threading.Event):
        super().__init__(daemon=True, name=name)
        self.port, self.topics, self.stop_event = node.http_port, topics, stop
        self.cursor = dict.fromkeys(topics, 0)
        self.seen: dict[str, dict[int, object]] = {t: {} for t in topics}
        self.wid: str | None = None
        self.resume_now = threading.Event()
        self.sessions = self.streams = self.redelivered = 0
        self.violations: list[str] = []
        self.lock = threading.Lock()
        self.error: BaseException | None = None

    @property
    def taken(self) -> int:
        return sum(map(len, self.seen.values()))

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if self.wid is None:
                    self.wid = self._new_session()
                else:
                    self._one_stream()
        except BaseException as exc:
            self.error = exc

    def _pause(self) -> None:
        self.stop_event.wait(0.05)

    def _new_session(self) -> str | None:
        body = {"topics": {t: {"from_seq": c} for t, c in self.cursor.items()},
                "heartbeat_ms": 1000}
        try:
            reply = http_call(self.port, "POST", "/v0/watch", body)
        except OSError:                     # the gateway is restarting
            self._pause()
            return None
        if reply.status >= 500:
            self._pause()
            return None
        assert reply.status == 200, reply.body
        self.sessions += 1
        return reply.json()["wid"]

    def _one_stream(self) -> None:
        resumed_at = dict(self.cursor)
        last_id = encode_cursor(resumed_at).decode()
        try:
            reader = SseReader(self.port, f"/v0/watch/{self.wid}",
                               headers={"Last-Event-ID": last_id})
        except OSError:
            self._pause()
            return
        with reader:
            if reader.status == 404:        # its shard restarted: the session is gone
                self.wid = None
                return
            if reader.status != 200:
                assert reader.status >= 500, (reader.status, reader.body)
                self._pause()
                return
            self.streams += 1
            self.resume_now.clear()
            self._read(reader, resumed_at)

    def _read(self, reader: SseReader, resumed_at: dict) -> None:
        passed: set[str] = set()
        for event in reader.until(lambda: self.stop_event.is_set() or self.resume_now.is_set()):
            if event.event == "error":
                return
            if event.event == "record":
                self._records(event.json(), resumed_at, passed)
            elif event.event in ("tombstone", "topic-deleted"):
                self.violations.append(f"{self.name}: unexpected {event.event} {event.data}")

    def _records(self, body: dict, resumed_at: dict, passed: set) -> None:
        topic = body["topic"]
        seen = self.seen[topic]
        with self.lock:
            for record in body["records"]:
                seq = record["$seq"]
                if seq <= self.cursor[topic]:
                    if topic in passed or seq > resumed_at[topic]:
                        self.violations.append(f"{self.name}: {topic} seq {seq} twice past "
                                               f"Last-Event-ID {resumed_at[topic]}")
                    elif seen.get(seq) != record["data"]:
                        self.violations.append(f"{self.name}: {topic} seq {seq} came again "
                                               "with other data")
                    self.redelivered += 1
                    continue
                if seq != self.cursor[topic] + 1:
                    self.violations.append(f"{self.name}: {topic} missed seqs "
                                           f"{self.cursor[topic] + 1}..{seq - 1}")
                seen[seq] = record["data"]
                self.cursor[topic] = seq
                passed.add(topic)


def wait_taken(watchers: list[Watcher], threads: list, more: int, what: str) -> None:
    base = {w.name: w.taken for w in watchers}
    wait_for(lambda: all(w.taken >= base[w.name] + more for w in watchers)
             or any(t.error for t in threads), HEAL_TIMEOUT_S, what)
    assert [t.error for t in threads if t.error] == []


def resume_all(watchers: list[Watcher]) -> None:
    streams = {w.name: w.streams for w in watchers}
    for watcher in watchers:
        watcher.resume_now.set()
    wait_for(lambda: all(w.streams > streams[w.name] for w in watchers), HEAL_TIMEOUT_S,
             "every watcher to resume")


def test_sigkill_shard_and_gateway_under_watch_streams(make_node):
    rng = random.Random("watch-kill")
    node = make_node(shards=2)
    topics = [names_on(0, 1, "wa")[0], names_on(1, 1, "wb")[0]]
    admin = node.client()
    for topic in topics:
        admin.put_topic(topic, durability="fsync")
    stop, stop_watch = threading.Event(), threading.Event()
    appenders = [Appender(node, topic, stop) for topic in topics]
    watchers = [Watcher(node, f"watcher{i}", topics, stop_watch) for i in range(3)]
    threads = [*appenders, *watchers]
    for thread in threads:
        thread.start()
    wait_taken(watchers, threads, PROGRESS, "watchers to get going")
    kill_gateway = process_killer("gateway")
    kills = [lambda: kill_shard_at(node, 0), lambda: kill_shard_at(node, 1),
             lambda: (time.monotonic(), kill_gateway(node, rng, None)),
             lambda: kill_shard_at(node, 0)] * CYCLES
    for number, kill in enumerate(kills):
        stop.wait(rng.uniform(0, 0.3))                # a random instant of the load
        kill()
        resume_all(watchers)
        wait_taken(watchers, threads, PROGRESS, f"watchers to go on after kill {number + 1}")
    log = node.log()
    assert log.count("child=shard-00 state=down exit_code=-9") == 2 * CYCLES
    assert log.count("child=shard-01 state=down exit_code=-9") == CYCLES
    assert log.count("child=gateway-00 state=down exit_code=-9") == CYCLES

    stop.set()
    for appender in appenders:
        appender.join(HEAL_TIMEOUT_S)
    assert [a.error for a in appenders if a.error] == []
    heads = {a.topic: max(a.acked) for a in appenders}
    assert {t: admin.get_topic(t)["head_seq"] for t in topics} == heads
    wait_for(lambda: all(w.cursor == heads for w in watchers) or any(w.error for w in watchers),
             HEAL_TIMEOUT_S, "every watcher to reach the final heads")
    stop_watch.set()
    for watcher in watchers:
        watcher.join(HEAL_TIMEOUT_S)
    assert [w.error for w in watchers if w.error] == []
    for watcher in watchers:
        assert watcher.violations == []
        for appender in appenders:
            assert watcher.seen[appender.topic] == appender.acked, \
                f"{watcher.name}: {appender.topic} differs from the acked records"
        assert watcher.streams > len(kills), f"{watcher.name} did not resume after each kill"
        assert watcher.sessions >= 2, f"{watcher.name} never lost its session"
