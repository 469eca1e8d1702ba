"""Recovery quarantine through a real node: a WAL frame damaged inside the log while the node
was down, then the HTTP view of it under `park` and `refuse` (docs/OPERATIONS.md section 12):
the topic answers 503 quarantined, its neighbour serves, readiness, GET /v0/quarantine,
the metrics, the repair, and a restart that finds a clean log."""

from __future__ import annotations

import os

import pytest

from tools.testing.node_harness import Node, wait_for
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.fs import RealFs
from topics_actors.storage.segment import IDX_ENTRY
from topics_actors.storage.wal_layout import group_dir, list_wal_files
from topics_actors.storage.wal_scan import FileScan
from topics_actors.topic_identity import topic_id

pytestmark = pytest.mark.timeout(120)

RECORDS = 6


def damage_append(data_dir: str, topic: str, seq: int) -> None:
    """Flip a byte of the seq field of `topic`'s Append `seq`: its checksum fails, its header
    still adds up, and frames follow it."""
    fs, tid = RealFs(), topic_id(topic)
    for _, path in list_wal_files(fs, group_dir(data_dir, 0)):
        scan = FileScan(fs, path)
        try:
            found = [f for f in scan.frames() if f.type == FrameType.APPEND
                     and f.topic_id == tid and f.seq == seq]
        finally:
            scan.close()
        if found:
            with open(path, "r+b") as handle:
                handle.seek(found[0].offset + 20)
                byte = handle.read(1)[0]
                handle.seek(found[0].offset + 20)
                handle.write(bytes([byte ^ 0xFF]))
            return
    raise AssertionError(f"no Append {seq} of {topic}")


def records(node: Node, topic: str) -> list:
    reply = node.http("POST", f"/v0/topics/{topic}/diff", {"from_seq": 0})
    assert reply.status == 200, reply.body
    return [(r["$seq"], r["data"]) for r in reply.json()["records"]]


def damaged_node(tmp_path, policy: str) -> tuple[Node, dict]:
    data_dir = os.path.join(str(tmp_path), "data")
    node = Node(data_dir, shards=1, env={"TOPICS_RECOVERY_ON_MISMATCH": policy}).start()
    for name in ("a", "n"):
        assert node.http("PUT", f"/v0/topics/{name}", {"durable": True}).status == 201
    for i in range(1, RECORDS + 1):
        for name in ("a", "n"):
            body = {"records": [{"data": f"{name}-{i}"}]}
            assert node.http("POST", f"/v0/topics/{name}", body).status == 200
    before = {name: records(node, name) for name in ("a", "n")}
    node.kill_group()          # a crash: no final checkpoint, the frames stay in the WAL
    wait_for(lambda: not node.children(), 10, "the node's processes to exit")
    damage_append(data_dir, "a", 3)
    node.start()
    return node, before


def metric(node: Node, name: str) -> float:
    text = node.http("GET", "/v0/metrics").body.decode()
    return float(next(line.split()[1] for line in text.splitlines()
                      if line.startswith(name + " ")))


@pytest.mark.parametrize("policy", ["park", "refuse"])
def test_quarantine_over_http_and_its_repair(tmp_path, policy):
    node, before = damaged_node(tmp_path, policy)
    try:
        reply = node.http("POST", "/v0/topics/a/diff", {"from_seq": 0})
        assert reply.status == 503 and reply.json()["error"]["code"] == "quarantined"
        assert node.http("POST", "/v0/topics/a", {"records": [{"data": 1}]}).status == 503
        assert records(node, "n") == before["n"]             # the neighbour: nothing lost
        assert node.http("POST", "/v0/topics/n", {"records": [{"data": 7}]}).status == 200
        ready = node.http("GET", "/v0/ready")
        if policy == "park":
            assert ready.status == 200
            assert (ready.json()["degraded"], ready.json()["quarantined"]) == (True, ["a"])
        else:
            assert ready.status == 503
            assert ready.json()["error"]["detail"]["quarantined"] == ["a"]
        listing = node.http("GET", "/v0/quarantine").json()
        assert listing["recovery_policy"] == policy
        [found] = listing["quarantined"]
        assert (found["topic"], found["first_bad_seq"]) == ("a", 3)
        assert found["would_lose"]["records"] == RECORDS - 2
        assert metric(node, "topics_recovery_quarantined") == 1
        assert metric(node, "topics_recovery_quarantines_total") == 1
        repaired = node.http("POST", "/v0/quarantine/a/repair")
        assert repaired.status == 200 and repaired.json()["lost_records"] == RECORDS - 2
        assert records(node, "a") == before["a"][:2]
        ready = node.http("GET", "/v0/ready")
        assert ready.status == 200 and ready.json()["degraded"] is False
        assert metric(node, "topics_recovery_quarantined") == 0
        assert node.http("POST", "/v0/quarantine/a/repair").status == 404
        assert node.stop() == 0
        node.start()
        assert node.http("GET", "/v0/quarantine").json()["quarantined"] == []
        assert records(node, "a") == before["a"][:2]
        assert records(node, "n") == before["n"] + [(RECORDS + 1, 7)]
        wait_for(lambda: node.http("GET", "/v0/ready").status == 200, 10, "readiness")
    finally:
        node.stop()


def test_a_damaged_segment_is_found_after_ready_and_repaired(tmp_path):
    """A clean stop checkpoints every record into segments; a byte of one of "a"'s sealed
    records rots; the restarted node is ready at once and its segment check, run between
    turns, quarantines "a" alone; the repair makes that record a deleted hole."""
    data_dir = os.path.join(str(tmp_path), "data")
    node = Node(data_dir, shards=1).start()
    try:
        for name in ("a", "n"):
            assert node.http("PUT", f"/v0/topics/{name}", {"durable": True}).status == 201
            for i in range(1, RECORDS + 1):
                body = {"records": [{"data": f"{name}-{i}"}]}
                assert node.http("POST", f"/v0/topics/{name}", body).status == 200
        before = {name: records(node, name) for name in ("a", "n")}
        assert node.stop() == 0               # the compactor's final checkpoint
        seg_dir = next(os.path.join(data_dir, "topics", d)
                       for d in os.listdir(os.path.join(data_dir, "topics"))
                       if d.startswith(f"{topic_id('a'):016x}-"))
        stem = os.path.join(seg_dir, sorted(os.listdir(seg_dir))[0][:-len(".data")])
        with open(stem + ".idx", "rb") as handle:
            offset, length, _, _ = IDX_ENTRY.unpack_from(handle.read(), 0)   # seq 1
        with open(stem + ".data", "r+b") as handle:
            handle.seek(offset + length - 12)
            byte = handle.read(1)[0]
            handle.seek(offset + length - 12)
            handle.write(bytes([byte ^ 0xFF]))
        node.start()
        found = wait_for(lambda: node.http("GET", "/v0/quarantine").json()["quarantined"],
                         20, "the segment check")
        assert [(q["topic"], q["first_bad_seq"]) for q in found] == [("a", 1)]
        assert records(node, "n") == before["n"]
        assert node.http("POST", "/v0/quarantine/a/repair").status == 200
        assert records(node, "a") == before["a"][1:]
    finally:
        node.stop()
