"""Short runs of the Jepsen-grade fault tool (tools/jepsen, docs/FAULT_TESTING.md
"Jepsen-grade faults"): three nodes and a ZooKeeper, each in its own network namespace,
writers and readers on fsync, disk and memory topics (acks=all), one fault of each kind,
then the oracle over every copy. The long runs are `python -m tools.jepsen --minutes 30`.

- network: partition (one node cut from everyone, a minority split, a follower cut from its
  leader), partition_zk (a leader cut from ZooKeeper only), asymmetric (one direction of a
  link), slow_link (loss, and delay or a rate limit); and pause (SIGSTOP of a node, past
  its session or within it);
- storage: power_loss of one node on LazyFS (unsynced data dropped) and disk_full (the
  small-disk node filled under load: 507, reads served, writes resume with no restart);
  and kill (kill -9 of a node, a shard or ZooKeeper).

Asserted: the tool's last line is PASS with 0 violations, every fault of the run healed,
exit status 0, and nothing left behind (processes, namespaces, mounts, temp dir). Method:
the tool's command in a subprocess, as root.
"""

import glob
import os
import subprocess
import sys

import pytest

from tools.testing import lazy_fs, net_lab, small_disk
from tools.testing.zookeeper_server import zookeeper_installed

REASON = (net_lab.usable() or lazy_fs.lazyfs_usable() or small_disk.usable()
          or (None if zookeeper_installed() else "no ZooKeeper installed"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(150),
              pytest.mark.skipif(REASON is not None, reason=str(REASON))]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def namespaces(pid: int) -> list[str]:
    """The network namespaces the tool run as `pid` made (tools/jepsen/lab_cluster.py)."""
    names = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    return [name for name in names if name.startswith(f"tj{pid % 100_000}-")]


def run_tool(tmp_path, *args: str) -> list[str]:
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    command = [sys.executable, "-m", "tools.jepsen", "--minutes", "5", "--seed", "34",
               "--gap-min-s", "0.3", "--gap-max-s", "1", *args]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=140)
    except subprocess.TimeoutExpired:
        proc.terminate()                  # the tool stops and removes what it started
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the tool ran too long:\n{out[-4000:]}")
    lines = out.splitlines()
    tail = "\n".join(lines[-40:]) + err[-2000:]
    assert lines and lines[-1].startswith("PASS: ") and lines[-1].endswith(" 0 violations"), tail
    assert proc.returncode == 0, tail
    assert not glob.glob(str(tmp_path / "jepsen_*")), "the temp dir was left"
    assert not namespaces(proc.pid), "network namespaces were left"
    with open("/proc/mounts") as mounts:
        assert str(tmp_path) not in mounts.read(), "a mount was left"
    return lines


def test_network_faults_and_a_pause_keep_every_acked_write(tmp_path):
    kinds = "partition,partition_zk,asymmetric,slow_link,pause"
    last = run_tool(tmp_path, "--faults", kinds, "--max-faults", "5")[-1]
    assert all(f"{kind} 1" in last for kind in kinds.split(",")), last


def test_power_loss_a_full_disk_and_a_kill_keep_every_acked_write(tmp_path):
    kinds = "power_loss,disk_full,kill"
    last = run_tool(tmp_path, "--faults", kinds, "--max-faults", "3",
                    "--every-node-power-share", "0")[-1]
    assert all(f"{kind} 1" in last for kind in kinds.split(",")), last


@pytest.mark.skipif(not os.environ.get("TOPICS_JEPSEN_MINUTES"),
                    reason="a long run: set TOPICS_JEPSEN_MINUTES (docs/FAULT_TESTING.md)")
@pytest.mark.timeout(0)
def test_every_fault_kind_for_minutes(tmp_path):
    """TOPICS_JEPSEN_MINUTES=30: the issue's run, every kind (power loss of every node
    included), seeded by TOPICS_JEPSEN_SEED (default 34)."""
    minutes = float(os.environ["TOPICS_JEPSEN_MINUTES"])
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    command = [sys.executable, "-m", "tools.jepsen", "--minutes", str(minutes), "--seed",
               os.environ.get("TOPICS_JEPSEN_SEED", "34"), "--faults", "all"]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=minutes * 60 + 900)
    lines = proc.stdout.splitlines()
    assert lines and lines[-1].startswith("PASS: ") and proc.returncode == 0, (
        "\n".join(lines[-60:]) + proc.stderr[-2000:])
