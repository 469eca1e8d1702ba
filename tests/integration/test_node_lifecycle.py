"""A node's life: restart with state, the data-dir lock, stopping, and orphan prevention."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support import alive, wait_for

pytestmark = pytest.mark.timeout(120)


def test_state_survives_restart(make_node, data_dir):
    node = make_node(shards=2, data_dir=data_dir)
    c = node.client()
    c.put_topic("keep", durability="fsync", ttl_ms=0, cap_records=7)
    c.append("keep", [{"data": i, "tag": f"t{i}"} for i in range(5)])
    c.append("disky", [{"data": "d"}])
    c.put_topic("gone")
    c.delete_topic("gone")
    c.put_topic("eph", durability="ephemeral")
    c.append("eph", [{"data": 1}])
    assert node.stop() == 0
    node = make_node(shards=2, data_dir=data_dir)
    c = node.client()
    keep = c.get_topic("keep")
    assert keep["head_seq"] == 5 and keep["config"]["cap_records"] == 7
    assert [r["$tag"] for r in c.diff("keep", include_tags=True)["records"]] == [
        f"t{i}" for i in range(5)]
    assert c.get_topic("disky")["head_seq"] == 1, "a clean stop must not burn reserved seqs"
    eph = c.get_topic("eph")
    assert eph["count"] == 0 and eph["config"]["durability"] == "ephemeral"
    assert "gone" not in [t["topic"] for t in c.list_topics()["topics"]]
    assert c.append("keep", [{"data": 9}])["seqs"] == [6]


def test_second_server_on_same_dir_refuses(make_node, data_dir, tmp_path):
    make_node(shards=1, data_dir=data_dir)
    env = dict(os.environ, TOPICS_DATA_DIR=data_dir, TOPICS_PORT="0", TOPICS_ZMQ_PORT="0",
               TOPICS_STOP_GRACE_MS="300")      # how long it waits for the lock
    second = subprocess.run([sys.executable, "-m", "supervisor.cli", "serve"], env=env,
                            capture_output=True, timeout=60, start_new_session=True)
    assert second.returncode == 2
    assert b"event=data_dir_busy" in second.stderr
    assert b"in use by another topics server" in second.stderr


def test_sigterm_stops_every_child(make_node):
    node = make_node(shards=2)
    children = [p.pid for p in node.children()]
    # two shards, the compactor, the reclaimer, a gateway and the fork server they came from
    assert len(children) == 6
    assert {node.process_pid(role) for role in ("compactor", "reclaimer", "gateway")
            } <= set(children)
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(30) == 0
    wait_for(lambda: not alive(children), 10, "children to exit")
    assert "event=stopped" in node.log()


def test_children_exit_when_supervisor_is_killed(make_node):
    node = make_node(shards=2)
    children = [p.pid for p in node.children()]
    assert len(children) == 6
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(10)
    wait_for(lambda: not alive(children), 15, "orphaned shards to exit")


def test_non_loopback_host_refused_without_auth(tmp_path):
    env = dict(os.environ, TOPICS_DATA_DIR=str(tmp_path / "d"), TOPICS_HOST="0.0.0.0",
               TOPICS_PORT="0", TOPICS_ZMQ_PORT="0")
    env.pop("TOPICS_ALLOW_INSECURE_NO_AUTH", None)
    result = subprocess.run([sys.executable, "-m", "supervisor.cli", "serve"], env=env,
                            capture_output=True, timeout=60, start_new_session=True)
    assert result.returncode != 0 and b"non-loopback" in result.stderr
    assert not os.path.exists(tmp_path / "d" / "wal")


def test_shard_count_change_keeps_everything(make_node, data_dir):
    node = make_node(shards=3, data_dir=data_dir)
    c = node.client()
    for i in range(12):
        c.append(f"move{i}", [{"data": [i, j]} for j in range(i + 1)])
    c.put_topic("fs", durability="fsync")
    c.append("fs", [{"data": "x"}])
    node.stop()
    for shards in (1, 4):
        node = make_node(shards=shards, data_dir=data_dir)
        c = node.client()
        for i in range(12):
            assert [r["data"] for r in c.diff(f"move{i}", limit=100)["records"]] == [
                [i, j] for j in range(i + 1)]
        assert c.get_topic("fs")["config"]["durability"] == "fsync"
        c.append("fs", [{"data": shards}])
        node.stop()
    node = make_node(shards=2, data_dir=data_dir)
    assert [r["data"] for r in node.client().diff("fs")["records"]] == ["x", 1, 4]


def test_stopped_shard_is_killed_and_restarted(make_node):
    node = make_node(shards=2, env={"TOPICS_HEARTBEAT_TIMEOUT_MS": "1500"})
    c = node.client(retry_deadline_ms=30_000)
    c.put_topic("hb", durability="fsync")
    c.append("hb", [{"data": 1}])
    shard = node.status()["shards"]
    victim = next(s for s in shard if s["shard"] == 0)
    os.kill(victim["pid"], signal.SIGSTOP)
    # The next incarnation, not "incarnation 2": on a loaded machine the short heartbeat
    # deadline may already have restarted the shard once before it was stopped here.
    restarted = wait_for(lambda: (lambda s: s if s["incarnation"] > victim["incarnation"]
                                  and s["state"] == "ready" else None)(
                                      node.status()["shards"][0]), 90, "a restart")
    assert restarted["pid"] != victim["pid"]
    assert "reason=no heartbeat for 1500 ms status=stopped" in node.log()
    for name in ("hb", "hb2", "hb3"):
        c.append(name, [{"data": 2}])
    assert [r["data"] for r in c.diff("hb")["records"]] == [1, 2]


def test_sigterm_during_replay_never_serves_half_replayed_state(make_node, data_dir):
    node = make_node(shards=1, data_dir=data_dir)
    c = node.client()
    for i in range(30):
        c.append("slow", [{"data": i}])
    node.stop()
    node = make_node(shards=1, data_dir=data_dir, start=False,
                     env={"TOPICS_FAILPOINTS": "recovery::mid_replay=sleep:200"})
    node.start(wait_ready=False)
    shard = wait_for(lambda: (lambda s: s if s["endpoint"] and s["state"] != "ready" else None)(
        node.status()["shards"][0]), 20, "the shard to start replaying")
    os.kill(shard["pid"], signal.SIGTERM)
    wait_for(lambda: "event=stopped_during_replay shard=0" in node.log(), 20,
             "the shard to stop during replay")
    first_ready = node.log().find("event=ready shard=0")
    assert first_ready == -1 or first_ready > node.log().find("event=stopped_during_replay")


def test_a_node_that_never_gets_ready_is_reported_with_its_status_and_log(make_node):
    """A readiness timeout names what the harness last saw and ends with the node's log, so
    a node that did not come up can be diagnosed from the test report alone."""
    node = make_node(shards=1, env={"TOPICS_GATEWAY_WORKERS": "0"})
    os.kill(node.proc.pid, signal.SIGSTOP)      # the supervisor answers no status now
    try:
        wait_for(lambda: _stopped(node.proc.pid), 10, "every thread of the supervisor stopped")
        with pytest.raises(AssertionError) as failure:
            node.wait_ready(0.5)
    finally:
        os.kill(node.proc.pid, signal.SIGCONT)
    report = str(failure.value)
    assert report.startswith("timed out after 0.5s waiting for node readiness; last status: ")
    assert "last status: TopicsError(not_ready: no node at" in report, report
    assert f"end of {node.log_path}:" in report and "event=listening" in report


def _stopped(pid: int) -> bool:
    """Every thread of `pid` in the stopped state: a SIGSTOP is taken by each thread when
    it is next scheduled, not when kill returns."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as stat:
            states.append(stat.read().rsplit(")", 1)[1].split()[0])
    return all(state in ("T", "t") for state in states)
