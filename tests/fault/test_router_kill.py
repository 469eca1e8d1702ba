"""Faults while routers forward (spec/api.md 6): restart, SIGKILL of the destination's shard,
of the source's shard, and of a gateway.

Fault K-ROUTER-1: a clean restart keeps routers, their knobs and cursors: nothing is copied
twice and forwarding resumes from the logged cursor.
Fault K-ROUTER-2/3: SIGKILL of the destination's (the router's) shard, then of the source's
shard, while writers append fsync-class batches to the source. Asserted: the destination
ends up holding every acked source record exactly once, in source order (the copies and
the cursor commit in one WAL batch).
Fault K-ROUTER-4: SIGKILL of a gateway: forwarding does not depend on it; the restarted
gateway serves the router.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tools.testing.node_harness import names_on, wait_for

pytestmark = pytest.mark.timeout(180)


class Writer(threading.Thread):
    """Appends {"n": i} batches to `topic` until stopped; remembers what was acked."""

    def __init__(self, node, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=1000, retry_deadline_ms=60_000)
        self.topic, self.stop_event = topic, stop
        self.acked: dict[int, object] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop_event.is_set():
                batch = [{"data": {"n": n, "k": k}} for k in range(1 + n % 3)]
                reply = self.client.append(self.topic, batch)
                self.acked.update(zip(reply["seqs"], (r["data"] for r in batch)))
                n += 1
        except BaseException as exc:   # reported by the test
            self.error = exc


def read_all(client, topic: str) -> list[dict]:
    records, cursor = [], 0
    while True:
        page = client.diff(topic, from_seq=cursor, limit=1000)
        records += page["records"]
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return records


def copies_match_source(client, source: str, dest: str) -> bool:
    return [r["data"] for r in read_all(client, dest)] == [
        r["data"] for r in read_all(client, source)]


def restarted(node, shard: int, incarnation: int):
    return wait_for(lambda: (lambda s: s if s["incarnation"] == incarnation
                             and s["state"] == "ready" else None)(
        node.status()["shards"][shard]), 60, f"shard {shard} restart")


def run_writer_and_kill(node, source: str, kill) -> tuple[Writer, object]:
    stop = threading.Event()
    writer = Writer(node, source, stop)
    writer.start()
    wait_for(lambda: len(writer.acked) >= 100, 60, "the writer to get going")
    kill()
    count = len(writer.acked)
    wait_for(lambda: len(writer.acked) >= count + 100, 60, "the writer after the kill")
    stop.set()
    writer.join(60)
    assert writer.error is None
    return writer, node.client()


# Checkpoints every 300 ms: the restart loads routers from a snapshot, not only the WAL.
FAST_CHECKPOINTS = {"TOPICS_CHECKPOINT_INTERVAL_MS": "300", "TOPICS_SEGMENT_MAX_EVENTS": "4"}


def wait_checkpoint(client) -> None:
    before = [s["snapshot_id"] for s in client.shard_statuses()]
    wait_for(lambda: all(s["snapshot_id"] > b
                         for s, b in zip(client.shard_statuses(), before)), 30, "a checkpoint")


@pytest.mark.parametrize("checkpointed", [False, True])
def test_restart_keeps_routers_and_cursors(make_node, tmp_path, checkpointed):
    data_dir = str(tmp_path / "restart")
    env = FAST_CHECKPOINTS if checkpointed else None
    node = make_node(shards=2, data_dir=data_dir, env=env)
    client = node.client()
    source, dest = names_on(0, 1, "rs")[0], names_on(1, 1, "rd")[0]
    client.put_router("keep", source, dest, filter="k*", guarantee="exactly_once")
    client.append(source, [{"data": n, "tag": "k"} for n in range(5)])
    wait_for(lambda: client.get_router("keep")["forwarded_total"] == 5, 20, "five copies")
    if checkpointed:
        wait_checkpoint(client)
    node.stop()
    node = make_node(shards=2, data_dir=data_dir, env=env)
    client = node.client()
    router = client.get_router("keep")
    assert (router["forwarded_total"], router["filter"], router["guarantee"]) == (
        5, ["tag", "Glob", "k*"], "exactly_once")
    client.append(source, [{"data": 5, "tag": "k"}, {"data": 6, "tag": "x"}])
    wait_for(lambda: client.get_router("keep")["forwarded_total"] == 6, 20, "the sixth copy")
    assert [r["data"] for r in read_all(client, dest)] == list(range(6))   # none twice


@pytest.mark.parametrize("victim", ["dest_shard", "source_shard"])
def test_sigkill_of_a_shard_while_forwarding(make_node, victim):
    node = make_node(shards=2)
    client = node.client()
    source, dest = names_on(0, 1, "ks")[0], names_on(1, 1, "kd")[0]
    client.put_topic(source, durability="fsync")
    client.put_router("k", source, dest)
    shard = 1 if victim == "dest_shard" else 0

    def kill():
        os.kill(node.shard_pid(shard), signal.SIGKILL)
        restarted(node, shard, 2)
    writer, reader = run_writer_and_kill(node, source, kill)
    stored = read_all(reader, source)
    assert {r["$seq"]: r["data"] for r in stored} == writer.acked
    wait_for(lambda: copies_match_source(reader, source, dest), 60,
             "every acked source record in the destination, once, in order")


def test_sigkill_of_a_gateway_while_forwarding(make_node):
    node = make_node(shards=2)
    client = node.client()
    source, dest = names_on(1, 1, "gs")[0], names_on(0, 1, "gd")[0]
    client.put_router("g", source, dest)

    def kill():
        os.kill(node.process_pid("gateway"), signal.SIGKILL)
        wait_for(lambda: node.process_pid("gateway") and node.http(
            "GET", "/v0/routers/g").status == 200, 60, "the gateway back")
    _writer, reader = run_writer_and_kill(node, source, kill)
    wait_for(lambda: copies_match_source(reader, source, dest), 60, "the copies")
    total = len(read_all(reader, dest))
    wait_for(lambda: node.http("GET", "/v0/routers/g").json()["forwarded_total"] == total,
             20, "forwarded_total over HTTP")


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_source_trim_gap_survives_restart(make_node, tmp_path, checkpointed):
    data_dir = str(tmp_path / "trim")
    env = FAST_CHECKPOINTS if checkpointed else None
    node = make_node(shards=2, data_dir=data_dir, env=env)
    client = node.client()
    source, dest = names_on(0, 1, "ts")[0], names_on(1, 1, "td")[0]
    client.put_topic(source, cap_records=3)
    client.put_topic(dest, cap_bytes=1, discard="reject")
    client.put_router("t", source, dest)
    client.append(source, [{"data": 1}])
    wait_for(lambda: client.get_router("t")["cursor"] == 1, 20, "the first copy")
    client.append(source, [{"data": n} for n in range(2, 7)])
    wait_for(lambda: client.get_router("t")["cursor"] == 3, 20, "the gap")
    client.put_topic(dest)
    wait_for(lambda: client.get_router("t")["forwarded_total"] == 4, 20, "the copies")
    if checkpointed:
        wait_checkpoint(client)
    node.stop()
    node = make_node(shards=2, data_dir=data_dir, env=env)
    page = node.client().diff(dest, from_seq=1)
    assert page["tombstone"]["reason"] == "source_trim"
    assert (page["tombstone"]["gap_from"], page["tombstone"]["gap_to"]) == (2, 3)
    assert [(r["$seq"], r["data"]) for r in page["records"]] == [(4, 4), (5, 5), (6, 6)]
