"""Fault: SIGKILL of each kind of process of a node under a mixed load; SIGSTOP of a shard;
a shard killed by an environment-armed failpoint between fsync and ack.

    fault id         what strikes                                  where
    K-<role>         SIGKILL at a seeded random instant            one process of the kind:
                                                                   shard, compactor, reclaimer,
                                                                   supervisor (tools/testing/
                                                                   kill_table.py ROLES: one line
                                                                   per kind, gateway included)
    K-STOP-SHARD     SIGSTOP of a shard past its heartbeat         a shard
                     deadline
    K-ORPHAN         SIGKILL of the supervisor while a shard is    the supervisor, a shard
                     stopped: the orphan still holds the data
                     dir; a new supervisor waits, then refuses
    K-FP-FSYNC       TOPICS_FAILPOINTS=wal::after_fdatasync=       every shard incarnation, at
                     kill@25: death after a batch is durable,      its 25th fsync
                     before its ack (the client retries with its
                     idempotency key)

Method: tools/testing/client_load.py runs one writer thread per topic (fsync, disk, memory,
ephemeral, a churned topic), appending batches, deleting by seq and by tag, with an oracle.
After the kill the node must heal (the victim restarted by the supervisor and ready; for
the supervisor: a new supervisor started at once waits until every child of the old one
has exited by itself, holding the data-dir lock it inherited), the load must
make progress again; then it stops and the oracle checks every topic (nothing acked lost
or changed, nothing fabricated or stored twice, no deleted record back, no tombstone for
deletes, head not below an acked seq). At the end: a clean stop (exit 0) and fsck clean.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from tools.testing.client_load import Load
from tools.testing.kill_table import ROLES
from tools.testing.node_harness import alive, wait_for
from topics_actors import fsck

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
SEED = 6
NODE_ENV = {"TOPICS_CHECKPOINT_INTERVAL_MS": "300", "TOPICS_SEGMENT_MAX_EVENTS": "40",
            "TOPICS_RECLAIM_INTERVAL_MS": "300", "TOPICS_WAL_FILE_BYTES": str(1 << 20),
            "TOPICS_HEARTBEAT_TIMEOUT_MS": "3000"}


def wait_progress(load: Load, more: int, what: str) -> None:
    base = load.acked
    wait_for(lambda: load.acked >= base + more or load.errors, 60, what)
    assert not load.errors, load.errors


def finish(node, load: Load, data_dir: str) -> None:
    load.stop()
    violations, intact = load.verify(node.client(request_timeout_ms=5000))
    assert not violations, "\n".join(violations[:20])
    assert intact > 20
    assert node.stop() == 0
    report = fsck.check(data_dir)
    assert report.ok, [str(p) for p in report.problems[:10]]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_sigkill_each_process_kind(make_node, data_dir, role):
    rng = random.Random(f"{SEED}-{role}")
    node = make_node(shards=2, data_dir=data_dir, env=NODE_ENV)
    load = Load()
    load.start(node)
    wait_progress(load, 60, "the load to get going")
    load.stop_event.wait(rng.uniform(0.05, 0.6))      # the random instant of the kill
    node, victim = ROLES[role](node, rng, lambda port: make_node(
        shards=2, data_dir=data_dir, env=dict(NODE_ENV, TOPICS_ZMQ_PORT=str(port))))
    if role != "supervisor":
        assert f"child={victim} state=down exit_code=-9" in node.log()
    wait_progress(load, 40, f"the load to go on after killing {victim}")
    finish(node, load, data_dir)


def test_sigstop_of_a_shard_past_its_heartbeat_deadline(make_node, data_dir):
    node = make_node(shards=2, data_dir=data_dir, env=NODE_ENV)
    load = Load()
    load.start(node)
    wait_progress(load, 60, "the load to get going")
    info = node.status()["shards"][1]
    os.kill(info["pid"], signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_for(lambda: "event=child_killed child=shard-01" in node.log(), 20,
                 "the supervisor to kill the silent shard")
    finally:
        try:
            os.kill(info["pid"], signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert time.monotonic() - stopped >= 2.5            # not before the deadline
    wait_for(lambda: (lambda s: s["incarnation"] > info["incarnation"]
                      and s["state"] == "ready")(node.status()["shards"][1]), 60,
             "the shard to be restarted")
    assert "child=shard-01 state=down exit_code=-9" in node.log()
    wait_progress(load, 40, "the load to go on after the restart")
    finish(node, load, data_dir)


def test_shard_dies_between_fsync_and_ack(make_node, data_dir):
    env = dict(NODE_ENV, TOPICS_FAILPOINTS="wal::after_fdatasync=kill@25")
    node = make_node(shards=2, data_dir=data_dir, env=env)
    load = Load()
    load.start(node)
    wait_for(lambda: node.log().count("state=down exit_code=-9") >= 2 or load.errors, 60,
             "shards to die at the failpoint")
    wait_progress(load, 40, "the load to go on")
    finish(node, load, data_dir)


def test_a_new_supervisor_waits_for_the_orphans_of_a_killed_one(make_node, data_dir):
    """An orphaned shard still writing its WAL must never meet a new shard replaying it."""
    node = make_node(shards=1, data_dir=data_dir, env=NODE_ENV)
    assert node.client().append("held", [{"data": 1}], create=True,
                                config={"durability": "fsync"})["seqs"] == [1]
    shard = node.status()["shards"][0]["pid"]
    os.kill(shard, signal.SIGSTOP)           # an orphan that cannot exit yet
    try:
        os.kill(node.proc.pid, signal.SIGKILL)
        node.proc.wait()
        hasty = make_node(shards=1, data_dir=data_dir, start=False,
                          env=dict(NODE_ENV, TOPICS_STOP_GRACE_MS="300"))
        with pytest.raises(AssertionError):
            hasty.start(timeout_s=20)
        assert hasty.proc.returncode == 2
        assert "or by processes it started that have not exited" in hasty.log()
        patient = make_node(shards=1, data_dir=data_dir, start=False,
                            env=dict(NODE_ENV, TOPICS_STOP_GRACE_MS="60000"))
        starting = threading.Thread(target=patient.start, kwargs={"timeout_s": 60})
        starting.start()
        wait_for(lambda: os.path.exists(patient.log_path)
                 and "event=data_dir_busy" in patient.log(), 20, "the wait to be logged")
        assert alive([shard]) and not patient.children(), "started beside a live orphan"
    finally:
        os.kill(shard, signal.SIGCONT)       # its pending SIGTERM (parent death) runs now
    starting.join(90)
    assert not alive([shard]) and patient.status()["node_ready"]
    assert [r["data"] for r in patient.client().diff("held")["records"]] == [1]
