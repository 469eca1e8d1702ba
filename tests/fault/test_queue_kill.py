"""Fault: SIGKILL of the shard owning a queue while workers claim and ack, and of the gateway
while workers take jobs from `/work` streams (issue 16).

    fault id        what strikes                               the queue
    Q-SHARD-fsync   SIGKILL of the queue's shard, 3 times      fsync class, leases_durable
                    (10 with TOPICS_TEST_HEAVY=1), at seeded
                    random instants; the supervisor restarts it
    Q-SHARD-disk    the same                                   disk class, leases_durable
    Q-SHARD-memory  the same                                   fsync class, memory-only leases
    Q-GATEWAY       SIGKILL of the gateway, 2 times (5 heavy)  fsync class, leases_durable;
                    under /work SSE consumers                  consumers ack over HTTP

Method: a producer thread appends jobs (ZeroMQ client, idempotent retries, so every job it
wrote is eventually acked to it); workers claim and ack with lease fences, half over the
ZeroMQ client and half over HTTP (Q-SHARD), or read `/work` streams and ack over HTTP
(Q-GATEWAY), retrying an ack until it has a definite answer. A holder claims three jobs
with a long lease before the first kill and does not ack them until the end. Every
delivery and ack outcome goes into the oracle (tests/fault/job_ledger.py) with the outages.

Asserted: the supervisor restarts the victim each time and work goes on; the queue drains
(empty, nothing in flight) once the producer stops; no job is acked successfully twice; a
job acked (or whose ack committed before a crash) is never handed out again; every
appended job was delivered and acked; a skipped ack is explained by an outage or an
expired lease; with durable leases the holder's leases survive every kill (nobody else
gets those jobs, and its fenced ack succeeds at the end) and no two hand-outs of a job
share a delivery count; with memory-only leases the holder's jobs become claimable and are
done by the workers.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from tests.fault.job_ledger import JobLedger
from tools.testing.kill_table import kill_shard_at, process_killer
from tools.testing.node_harness import http_call, names_on, wait_for
from tools.testing.sse_reader import SseReader

HEAVY = os.environ.get("TOPICS_TEST_HEAVY") == "1"
pytestmark = [pytest.mark.timeout(300 if HEAVY else 120)]
SHARD_KILLS = 10 if HEAVY else 3
GATEWAY_KILLS = 5 if HEAVY else 2
LEASE_MS = 3000             # orphaned leases (a claim whose answer died) run out this fast
HOLD_MS = 600_000           # the holder's leases outlive the test
PROGRESS_JOBS = 40          # acks between two kills
HEAL_S = 60


class Producer(threading.Thread):
    """Appends small batches of jobs until stopped; keeps the seqs acked to it."""

    def __init__(self, node, queue: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.queue, self.stop_event = queue, stop
        self.jobs: set[int] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop_event.is_set():
                reply = self.client.append(self.queue, [{"data": {"job": n + k}}
                                                        for k in range(4)])
                self.jobs.update(reply["seqs"])
                n += 4
                self.stop_event.wait(0.01)      # pace: a backlog, not a flood
        except BaseException as exc:            # reported by the test
            self.error = exc


class Worker(threading.Thread):
    """Claims up to 4 jobs, then acks them fenced by their lease ids, until stopped."""

    def __init__(self, name: str, queue: str, ledger: JobLedger, stop: threading.Event):
        super().__init__(daemon=True, name=name)
        self.queue, self.ledger, self.stop_event = queue, ledger, stop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                sent = time.monotonic()
                jobs = self.claim()
                self.ledger.delivered(jobs, sent, self.name)
                if not jobs:
                    self.stop_event.wait(0.02)
                    continue
                sent = time.monotonic()
                reply = self.ack(jobs)
                self.ledger.answered(jobs, reply, sent, self.name)
        except BaseException as exc:
            self.error = exc


class ZmqWorker(Worker):
    def __init__(self, node, *args):
        super().__init__(*args)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)

    def claim(self) -> list[dict]:
        return self.client.claim(self.queue, self.name, max=4, lease_ms=LEASE_MS)["claimed"]

    def ack(self, jobs: list[dict]) -> dict:
        return self.client.ack(self.queue, self.name, [j["$seq"] for j in jobs],
                               [j["lease_id"] for j in jobs])


def http_retrying(port: int, path: str, body: dict, deadline_s: float = HEAL_S) -> dict:
    """POST until a definite answer: a refused connection, a timeout or a 5xx (the gateway
    or the shard behind it restarting) is tried again; a 4xx fails the worker."""
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            reply = http_call(port, "POST", path, body, timeout_s=10)
            if reply.status == 200:
                return reply.json()
            if reply.status < 500:
                raise AssertionError(f"{path}: {reply.status} {reply.body[:300]!r}")
        except OSError:
            pass
        if time.monotonic() > give_up:
            raise AssertionError(f"{path}: no answer in {deadline_s}s")
        time.sleep(0.05)


class HttpWorker(Worker):
    def __init__(self, node, *args):
        super().__init__(*args)
        self.port = node.http_port

    def claim(self) -> list[dict]:
        return http_retrying(self.port, f"/v0/topics/{self.queue}/claim",
                             {"node": self.name, "max": 4, "lease_ms": LEASE_MS})["claimed"]

    def ack(self, jobs: list[dict]) -> dict:
        return ack_over_http(self.port, self.queue, self.name, jobs)


def ack_over_http(port: int, queue: str, node_name: str, jobs: list[dict]) -> dict:
    return http_retrying(port, f"/v0/topics/{queue}/ack",
                         {"node": node_name, "seqs": [j["$seq"] for j in jobs],
                          "lease_ids": [j["lease_id"] for j in jobs]})


# --- steps shared by the tests ----------------------------------------------------------------

def make_queue(node, durability: str, durable_leases: bool) -> str:
    queue = names_on(0, 1, "q")[0]
    node.client().put_topic(queue, type="queue", durability=durability,
                            leases_durable=durable_leases)
    return queue


def hold_jobs(node, queue: str, ledger: JobLedger) -> list[dict]:
    """Three jobs claimed with a lease that outlives the test, acked only at the end."""
    client = node.client()
    client.append(queue, [{"data": {"held": k}} for k in range(3)])
    jobs = client.claim(queue, "holder", max=3, lease_ms=HOLD_MS)["claimed"]
    assert [j["$seq"] for j in jobs] == [1, 2, 3]
    ledger.delivered(jobs, time.monotonic(), "holder")
    return jobs


def wait_acks(ledger: JobLedger, more: int, threads: list, what: str) -> None:
    base = ledger.acked_count
    wait_for(lambda: ledger.acked_count >= base + more or any(t.error for t in threads),
             HEAL_S, what)
    assert [t.error for t in threads if t.error] == []


def wait_drained(node, queue: str, left: int, threads: list) -> None:
    """The queue holds only `left` jobs, all in flight (the holder's), and workers are
    idle: orphaned leases had LEASE_MS to run out and be done again."""
    client = node.client(retry_deadline_ms=30_000)

    def drained():
        assert [t.error for t in threads if t.error] == []
        topic = client.get_topic(queue, touch=False)
        return topic["count"] == left and topic["queue"]["in_flight"] == left
    wait_for(drained, HEAL_S, f"{queue} to drain to {left} jobs", interval_s=0.1)


def stop_threads(stop: threading.Event, threads: list) -> None:
    stop.set()
    for thread in threads:
        thread.join(HEAL_S)
    assert not [t.name for t in threads if t.is_alive()], "a thread did not stop"
    assert [t.error for t in threads if t.error] == []


def finish_holder(node, queue: str, held: list[dict], ledger: JobLedger,
                  durable_leases: bool) -> None:
    sent = time.monotonic()
    reply = node.client().ack(queue, "holder", [j["$seq"] for j in held],
                              [j["lease_id"] for j in held])
    ledger.answered(held, reply, sent, "holder")
    seqs = [j["$seq"] for j in held]
    if durable_leases:
        assert reply["acked_seqs"] == seqs, "the holder's durable leases did not survive"
        assert not [d for s in seqs for d in ledger.deliveries[s] if d.worker != "holder"]
    else:
        assert reply["skipped"] == seqs, "memory-only leases outlived the restart"
        assert all(len(ledger.deliveries[s]) > 1 for s in seqs), "held jobs not redone"


def check_oracle(node, queue: str, producer: Producer, ledger: JobLedger,
                 durability: str) -> None:
    jobs = producer.jobs | {1, 2, 3}
    topic = node.client().get_topic(queue, touch=False)
    if durability == "fsync":
        assert sorted(jobs) == list(range(1, max(jobs) + 1)), "appended seqs not dense"
        assert topic["head_seq"] == max(jobs)
    else:   # a disk-class recovery pads the head to its reservation: holes, never reused
        assert topic["head_seq"] >= max(jobs)
    assert (topic["count"], topic["queue"]["ready"], topic["queue"]["in_flight"]) == (0, 0, 0)
    violations = ledger.violations(jobs)
    assert not violations, "\n".join(violations[:20])


# --- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("durability,durable_leases", [
    ("fsync", True), ("disk", True), ("fsync", False)], ids=["fsync", "disk", "memory"])
def test_sigkill_queue_shard_under_claims_and_acks(make_node, durability, durable_leases):
    rng = random.Random(f"queue-{durability}-{durable_leases}")
    node = make_node(shards=2)
    queue = make_queue(node, durability, durable_leases)
    ledger, stop = JobLedger(durable_leases), threading.Event()
    held = hold_jobs(node, queue, ledger)
    producer = Producer(node, queue, threading.Event())
    workers = [cls(node, f"{kind}{i}", queue, ledger, stop)
               for i in range(2) for cls, kind in ((ZmqWorker, "zmq"), (HttpWorker, "http"))]
    threads = [producer, *workers]
    for thread in threads:
        thread.start()
    wait_acks(ledger, PROGRESS_JOBS, threads, "work to get going")
    for kill in range(SHARD_KILLS):
        stop.wait(rng.uniform(0, 0.3))                  # a random instant of the load
        ledger.outage(*kill_shard_at(node, 0))
        wait_acks(ledger, PROGRESS_JOBS, threads, f"work to go on after kill {kill + 1}")
    assert node.log().count("child=shard-00 state=down exit_code=-9") == SHARD_KILLS
    producer.stop_event.set()
    producer.join(HEAL_S)
    wait_drained(node, queue, 3 if durable_leases else 0, threads)
    stop_threads(stop, threads)
    finish_holder(node, queue, held, ledger, durable_leases)
    check_oracle(node, queue, producer, ledger, durability)


class WorkConsumer(threading.Thread):
    """Reads a `/work` stream of the queue and acks each job over HTTP; when the stream
    breaks (the gateway died) it opens a new one once the gateway answers again."""

    def __init__(self, node, name: str, queue: str, ledger: JobLedger, stop: threading.Event):
        super().__init__(daemon=True, name=name)
        self.port, self.queue, self.ledger, self.stop_event = node.http_port, queue, ledger, stop
        self.path = f"/v0/topics/{queue}/work?node={name}&max=4&lease_ms={LEASE_MS}"
        self.streams = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._one_stream()
        except BaseException as exc:
            self.error = exc

    def _open(self) -> SseReader | None:
        try:
            reader = SseReader(self.port, self.path, timeout_s=10)
        except OSError:
            self.stop_event.wait(0.05)
            return None
        if reader.status != 200:
            reader.close()
            if reader.status < 500:
                raise AssertionError(f"/work: {reader.status} {reader.body[:300]!r}")
            return None
        self.streams += 1
        return reader

    def _one_stream(self) -> None:
        reader = self._open()
        if reader is None:
            return
        with reader:
            for event in reader.until(self.stop_event.is_set):
                if event.event == "job":
                    job = event.json()
                    self.ledger.delivered([job], time.monotonic(), self.name)
                    sent = time.monotonic()
                    reply = ack_over_http(self.port, self.queue, self.name, [job])
                    self.ledger.answered([job], reply, sent, self.name)
                elif event.event == "error":
                    raise AssertionError(f"/work error: {event.data}")


def test_sigkill_gateway_under_work_streams(make_node):
    rng = random.Random("queue-gateway")
    node = make_node(shards=2)
    queue = make_queue(node, "fsync", True)
    ledger, stop = JobLedger(True), threading.Event()
    held = hold_jobs(node, queue, ledger)
    producer = Producer(node, queue, threading.Event())
    consumers = [WorkConsumer(node, f"sse{i}", queue, ledger, stop) for i in range(3)]
    threads = [producer, *consumers]
    for thread in threads:
        thread.start()
    wait_acks(ledger, PROGRESS_JOBS, threads, "work to get going")
    kill_gateway = process_killer("gateway")
    for kill in range(GATEWAY_KILLS):
        stop.wait(rng.uniform(0, 0.3))
        killed = time.monotonic()
        kill_gateway(node, rng, None)
        ledger.outage(killed, time.monotonic())
        wait_acks(ledger, PROGRESS_JOBS, threads, f"work to go on after kill {kill + 1}")
    assert node.log().count("child=gateway-00 state=down exit_code=-9") == GATEWAY_KILLS
    assert all(c.streams > 1 for c in consumers), "a consumer never had to reconnect"
    producer.stop_event.set()
    producer.join(HEAL_S)
    wait_drained(node, queue, 3, threads)
    stop_threads(stop, threads)
    finish_holder(node, queue, held, ledger, True)
    check_oracle(node, queue, producer, ledger, "fsync")
