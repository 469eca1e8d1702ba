"""One function per fault kind: fault(run, rng) strikes a seeded random victim of the
ClusterRun, undoes what must be undone (a restart, SIGCONT, ZooKeeper started again) and
returns a line saying what it did. The cluster is not healed yet when it returns; the loop
waits for that. A fault that cannot be completed raises AssertionError or RuntimeError
after undoing as much as it can.

    node_kill      kill -9 of a whole node (supervisor and children); once ZooKeeper has
                   ended its session, the node starts again on the same data dir, id, port
                   (spec/replication.md D8 scenarios 1 and 27)
    shard_kill     kill -9 of one WAL shard process; the node's supervisor restarts it (26)
    node_pause     SIGSTOP of a whole node until its session ended, then SIGCONT (8)
    zk_kill_short  kill -9 of ZooKeeper, started again at once on its data dir (24)
    zk_kill_long   kill -9 of ZooKeeper, started again after several session timeouts (25)
"""

from __future__ import annotations

import random
import signal
import time

from tools.cluster_crashtest.cluster_run import SESSION_TIMEOUT_MS, ClusterRun
from tools.testing.cluster_harness import wait_unregistered
from tools.testing.kill_table import kill_shard_at

SESSION_END_WAIT_S = 30      # ZooKeeper ends a 1 s session within about 1.25 s
PAUSE_EXTRA_S = (0.0, 1.5)   # a paused node stays stopped this much past its session's end
ZK_LONG_DOWN_S = (2.5, 5.0)  # several session timeouts
ZK_START_ATTEMPTS = 3
DETECT_S = 0.5               # the nodes' ZooKeeper clients see a dead server within this


def node_kill(run: ClusterRun, rng: random.Random) -> str:
    nid = rng.choice(sorted(run.nodes))
    run.nodes[nid].kill_group()
    killed = time.monotonic()
    try:
        wait_unregistered(run.nodes, nid, SESSION_END_WAIT_S)
    finally:
        gone_s = time.monotonic() - killed
        ready_s = run.restart_node(nid)
    return f"{nid}: session ended {gone_s:.1f}s after the kill, restarted, ready in {ready_s:.1f}s"


def shard_kill(run: ClusterRun, rng: random.Random) -> str:
    nid = rng.choice(sorted(run.nodes))
    index = rng.randrange(run.shards)
    killed_s, back_s = kill_shard_at(run.nodes[nid], index)
    return f"{nid} shard {index}: restarted by its supervisor, ready in {back_s - killed_s:.1f}s"


def node_pause(run: ClusterRun, rng: random.Random) -> str:
    nid = rng.choice(sorted(run.nodes))
    extra_s = rng.uniform(*PAUSE_EXTRA_S)
    run.signal_node(nid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_unregistered(run.nodes, nid, SESSION_END_WAIT_S)
        gone_s = time.monotonic() - stopped
        time.sleep(extra_s)
    finally:
        run.signal_node(nid, signal.SIGCONT)
    return (f"{nid}: session ended {gone_s:.1f}s after SIGSTOP, "
            f"SIGCONT after {time.monotonic() - stopped:.1f}s")


def zk_kill_short(run: ClusterRun, rng: random.Random) -> str:
    return _zk_kill(run, 0.0)


def zk_kill_long(run: ClusterRun, rng: random.Random) -> str:
    return _zk_kill(run, rng.uniform(*ZK_LONG_DOWN_S))


def _zk_kill(run: ClusterRun, down_s: float) -> str:
    """kill -9, `down_s` later a start on the same data dir. While it is down, the acks the
    writers got after the first DETECT_S are counted: the engine means leaders to pause
    `all` acks while their session is suspended (spec/replication.md D8 24)."""
    run.zk.kill()
    killed = time.monotonic()
    acks_down = None
    if down_s > DETECT_S:
        time.sleep(DETECT_S)
        before = _acks(run)
        time.sleep(down_s - DETECT_S)
        acks_down = _acks(run) - before
    else:
        time.sleep(down_s)
    for attempt in range(ZK_START_ATTEMPTS):
        try:
            run.zk.start()
            break
        except RuntimeError:             # not ready in time: it was stopped; once more
            if attempt == ZK_START_ATTEMPTS - 1:
                raise
    down = time.monotonic() - killed
    during = ("" if acks_down is None else
              f", {acks_down} acks in {down_s - DETECT_S:.1f}s of it (from {DETECT_S:g}s "
              "after the kill)")
    return (f"ZooKeeper down {down:.1f}s ({down * 1000 / SESSION_TIMEOUT_MS:.1f} session "
            f"timeouts{during}), restarted on its data dir")


def _acks(run: ClusterRun) -> int:
    return sum(len(writer.ack_log) for writer in run.writers.values())


FAULTS = {
    "node_kill": node_kill,
    "shard_kill": shard_kill,
    "node_pause": node_pause,
    "zk_kill_short": zk_kill_short,
    "zk_kill_long": zk_kill_long,
}
