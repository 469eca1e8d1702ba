"""tools/bench/replication_bench.py runs end to end at a tiny size (one run of 0.5 s per
case, 4 producers, no Redis): a plain node, a ZooKeeper and three clustered nodes start,
every case reports records/s in both shapes with no errors, the report carries the RF 3
`acks: all` ÷ RF 1 ratio, and nothing the bench started is left behind."""

import glob
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from tools.testing.zookeeper_server import zookeeper_installed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60),
              pytest.mark.skipif(not zookeeper_installed(), reason="ZooKeeper not installed")]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH_DEADLINE_S = 45
CASES = ("RF 1 `fsync`, single node", "RF 3 `fsync`, `acks: all`",
         "RF 3 `fsync`, `acks: leader`")


def _run_bench(tmp_dir: str) -> subprocess.CompletedProcess:
    """The bench in its own session, with TMPDIR in the test's dir; on the deadline it gets
    SIGTERM (which stops what it started), then SIGKILL."""
    argv = [sys.executable, "tools/bench/replication_bench.py", "--runs", "1",
            "--seconds", "0.5", "--warmup", "0.5", "--producers", "4",
            "--batch-window", "2", "--no-redis"]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TMPDIR=tmp_dir)
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BENCH_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"the bench took over {BENCH_DEADLINE_S} s: {err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_the_bench_reports_every_case_in_both_shapes():
    with tempfile.TemporaryDirectory(prefix="repl-bench-test-") as tmp_dir:
        done = _run_bench(tmp_dir)
        assert done.returncode == 0, done.stderr[-3000:]
        assert glob.glob(os.path.join(tmp_dir, "*")) == [], "the bench left temp dirs"
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| RF")]
    assert sorted((row[0][2:], row[1]) for row in rows) == sorted(
        (case, shape) for case in CASES
        for shape in ("1 rec/append, 4 producers", "64 rec/append, 4 in flight"))
    for row in rows:
        assert row[2] not in ("n/a", "0"), row          # records/s
        assert row[-1].rstrip(" |") == "0", row         # errors
    assert "RF 3 `acks: all` ÷ RF 1 records/s" in done.stdout
    assert "Redis 1 master" not in done.stdout
