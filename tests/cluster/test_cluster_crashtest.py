"""Smoke test of the cluster crash tool (tools/cluster_crashtest, docs/FAULT_TESTING.md
"Cluster crash test"): about 25 s of seeded faults (kill -9 of a node, of a shard, SIGSTOP of
a node, kill -9 of ZooKeeper) against three nodes and one ZooKeeper under acks=all writes.
Goal: the tool runs end to end, its verdict is PASS (every acked record on every replica at
its seq, identical copies, no seq reused, every fault healed), and it leaves no process and
no temp dir behind. Method: the tool's command in a subprocess, its output parsed."""

import glob
import os
import signal
import subprocess
import sys

import psutil
import pytest

from tools.testing.zookeeper_server import zookeeper_installed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240),
              pytest.mark.skipif(not zookeeper_installed(), reason="no ZooKeeper installed")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_twenty_five_seconds_of_cluster_faults_keep_every_acked_write(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    command = [sys.executable, "-m", "tools.cluster_crashtest", "--minutes", "0.42",
               "--seed", "7", "--gap-min-s", "1", "--gap-max-s", "3"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=220)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)           # the tool stops what it started
        output, _ = proc.communicate(timeout=15)
        pytest.fail(f"the tool ran too long:\n{output[-4000:]}")
    lines = output.splitlines()
    assert any(line.startswith("faults: ") and not line.startswith("faults: 0")
               for line in lines), output[-4000:]
    assert lines[-1] == "failures 0; verdict: PASS", output[-4000:]
    assert proc.returncode == 0
    assert any(line.startswith("oracle checked") and line.endswith(": 0 violations")
               for line in lines), output[-4000:]
    assert not glob.glob(str(tmp_path / "cluster-crashtest-*")), "the temp dir was left"
    assert not started_under(str(tmp_path)), "processes were left running"


def started_under(path: str) -> list[int]:
    """Processes whose command line or data dir lies under `path` (ZooKeeper, nodes)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            data_dir = proc.environ().get("TOPICS_DATA_DIR", "")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            data_dir = ""
        if data_dir.startswith(path) or path in " ".join(proc.info["cmdline"] or []):
            found.append(proc.info["pid"])
    return found
