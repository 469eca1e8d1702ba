"""Fault: named failpoints at every persistence call site (storage/failpoint.py SITES).

    fault id           what strikes                                     where
    F-ABORT-<site>     the process dies at the site (first and last     every site the mixed
                       hit), then power loss: keep or drop              workload reaches
    F-RAISE-<site>     OSError(EIO) at the site (first hit); the        the same
                       workload goes on
    F-RECOVERY-<site>  the process dies during recovery, at the site    recovery::mid_replay,
                       (a garbled tail makes the truncation happen)     recovery::before_truncate
    F-RETIRE           the process dies between two group moves of a    layout::mid_retire
                       shard-count change
    F-ENV              TOPICS_FAILPOINTS arms a subprocess (kill@N)     any site

Asserted: the site table matches the code and every module that makes a persistence call
has a site; after each fault, recovery passes the oracle of tests/fault/oracle.py, fsck is
clean, and the shards write, checkpoint and recover again (tests/fault/test_crash_points.py
after_recovery). Subprocess kills at sites: tests/fault/test_kill_matrix.py and
test_checkpoint_kill.py.
"""

from __future__ import annotations

import os
import pathlib
import random
import re
import subprocess
import sys

import pytest

from tests.fault.mixed_workload import recover_and_check, run_to_crash
from tools.testing.shard_harness import ShardEnv, rec
from tools.testing.crash_fs import CrashFs
from topics_actors.storage import failpoint
from topics_actors.storage.wal_layout import prepare_layout

ROOT = pathlib.Path(__file__).resolve().parents[2] / "topics_actors"
SITE_RE = re.compile(r'failpoint\.(?:hit|armed)\("([^"]+)"\)')
PERSISTENCE_RE = re.compile(r"\b(?:fs|handle|_data|_idx)\.(?:open|rename|remove|rmdir|makedirs|"
                            r"sync_dir|write_all_at|sync_data|sync_all|set_len)\(")
SEAM = {"fs.py", "failpoint.py"}
RECOVERY_SITES = ("recovery::mid_replay", "recovery::before_truncate")
# Sites after a commit, where the reference panics: a crash site, not an I/O error site (an
# error there would answer a write that is already durable with an error).
# The cold tier's sites have their own sweeps: tests/unit/test_segment_upkeep.py (a crash at
# every mutating call of a pass) and tests/fault/test_reclaimer_kill.py (kill -9 at each).
COLD_SITES = ("cold::after_copy", "cold::before_hot_delete")
# A quarantine repair's site has its own test: tests/unit/test_recovery_quarantine.py.
REPAIR_SITES = ("repair::before_sync",)
WORKLOAD_SITES = sorted(set(failpoint.SITES) - {*RECOVERY_SITES, "layout::mid_retire",
                                                 *COLD_SITES, *REPAIR_SITES})
CRASH_ONLY = {"delete::after_commit_before_apply", "retention::before_apply"}


@pytest.fixture
def disarmed():
    yield
    failpoint.disarm()
    failpoint.count_hits(False)


@pytest.fixture(scope="module")
def hits(tmp_path_factory) -> dict[str, int]:
    """How often the mixed workload reaches each site."""
    failpoint.count_hits(True)
    try:
        run_to_crash(str(tmp_path_factory.mktemp("hits") / "data"), None).die()
        return dict(failpoint.HITS)
    finally:
        failpoint.count_hits(False)


def test_the_site_table_matches_the_code():
    used = {name for path in ROOT.rglob("*.py") if path.name != "failpoint.py"
            for name in SITE_RE.findall(path.read_text())}
    assert used == set(failpoint.SITES)


def test_every_persistence_module_has_a_site():
    bare = [str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
            if path.name not in SEAM and PERSISTENCE_RE.search(path.read_text())
            and not SITE_RE.search(path.read_text())]
    assert not bare, f"persistence calls without a failpoint in {bare}"


def test_the_workload_reaches_every_site_but_recovery_and_retirement(hits):
    assert set(failpoint.SITES) - set(hits) == {*RECOVERY_SITES, "layout::mid_retire",
                                                *COLD_SITES, *REPAIR_SITES}


def test_environment_arms_a_subprocess():
    script = ("from topics_actors.storage import failpoint as f\n"
              "for n in range(3):\n    f.hit('x::y'); print('past', n + 1, flush=True)\n")
    env = dict(os.environ, TOPICS_FAILPOINTS="x::y=kill@2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=30, cwd=ROOT.parent)
    assert done.returncode == -9 and done.stdout.split("\n")[:-1] == ["past 1"]
    env["TOPICS_FAILPOINTS"] = "x::y=raise"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=30, cwd=ROOT.parent)
    assert done.returncode == 1 and "OSError: [Errno 5] failpoint x::y" in done.stderr


@pytest.mark.parametrize("mode", ["keep", "drop"])
@pytest.mark.parametrize("site", WORKLOAD_SITES)
def test_abort_at_a_site(tmp_path, hits, disarmed, site, mode):
    for nth in sorted({1, hits[site]}):
        failpoint.arm(f"{site}=abort@{nth}")
        run = run_to_crash(str(tmp_path / f"{nth}" / "data"), None)
        failpoint.disarm()
        assert run.crashed, f"{site}@{nth} was not reached"
        recover_and_check(run, mode, f"abort at {site} hit {nth}, power loss {mode}")


@pytest.mark.parametrize("site", sorted(set(WORKLOAD_SITES) - CRASH_ONLY))
def test_raise_at_a_site(tmp_path, disarmed, site):
    failpoint.arm(f"{site}=raise@1")
    run = run_to_crash(str(tmp_path / "data"), None, tolerate_errors=True)
    failpoint.disarm()
    assert failpoint.HITS[site] >= 1
    run.verify("keep", restarted=False)
    run.die()
    recover_and_check(run, "keep", f"EIO at {site}")


@pytest.mark.parametrize("site", RECOVERY_SITES)
def test_abort_during_recovery(tmp_path, disarmed, site):
    run = run_to_crash(str(tmp_path / "data"), None)
    tails = [(h.core.wal.writer.handle.path, h.core.wal.writer.tail) for h in run.shards]
    run.die()
    for path, tail in tails:                 # a torn frame after the end of the log
        with open(path, "r+b") as handle:
            handle.seek(tail)
            handle.write(b"\x00\x00\x27\x0f" + b"\xab" * 16)
    failpoint.arm(f"{site}=abort@1")
    with pytest.raises(failpoint.Abort):
        run.start()
    failpoint.disarm()
    run.die()
    recover_and_check(run, "keep", f"abort during recovery at {site}")


def test_abort_between_group_moves_of_a_shard_count_change(tmp_path, disarmed):
    data_dir = str(tmp_path / "data")
    os.makedirs(data_dir)
    env = ShardEnv(data_dir, CrashFs(grave=str(tmp_path / "grave")))
    cluster = env.cluster(2)
    acked = {}
    for n in range(12):
        name = f"t{n % 4}"
        ShardEnv.owner(cluster, name).append(name, rec(b'{"n":%d}' % n))
    for name in ("t0", "t1", "t2", "t3"):
        ShardEnv.owner(cluster, name).put(name, durable=True)
        acked[name] = ShardEnv.owner(cluster, name).records(name)
    for h in cluster:
        h.crash()
    failpoint.arm("layout::mid_retire=abort@1")
    with pytest.raises(failpoint.Abort):
        prepare_layout(env.fs, data_dir, 3)
    failpoint.disarm()
    env.fs.power_loss("drop", random.Random(3))
    cluster = env.cluster(3)
    for name, records in acked.items():
        assert ShardEnv.owner(cluster, name).records(name) == records, name
    for h in cluster:
        h.crash()
