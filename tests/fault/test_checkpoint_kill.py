"""Fault: SIGKILL of the compactor during checkpoints (at random instants and exactly at each
persistence step), then a clean restart checked against an oracle of acked writes.

Fault K-COMPACTOR-1: kill -9 of the compactor at seeded random instants while writer threads
append to fsync-class topics (and one disk-class topic) with checkpoints about every second.
Fault K-COMPACTOR-2: kill -9 of the compactor exactly at one checkpoint persistence step,
armed as a failpoint (segment put between .data and .idx, before the flush, before and after
the snapshot rename, before the prune), parametrized.

Asserted after a clean stop and a restart: every acked fsync-class write is present once,
with identical seq, data, tag and meta; no record that was never sent appears; seqs are
dense; the disk topic holds every acked record; checkpoints really happened (snapshots,
segment files, WAL files removed); after a failpoint kill, one completed checkpoint leaves
no segment file that neither kept snapshot lists.

Method: writer threads, the oracle and the log and disk probes of checkpoint_harness.py.
"""

from __future__ import annotations

import os
import random
import signal
import threading

import pytest

from tests.fault.checkpoint_harness import (
    FAST_CHECKPOINTS, SEED, assert_log_clean, assert_no_orphan_segments, check_oracle,
    checkpoints_logged, compactor, finish, make_topics, segment_files, snapshot_ids,
    spread_topics, start_writers, wait_acked, wait_checkpoints, wait_compactor_ready, wal_idxs,
)
from tools.testing.node_harness import wait_for


# --- K-COMPACTOR-1: random instants --------------------------------------------------------

@pytest.mark.timeout(90)
def test_sigkill_compactor_at_random_instants(make_node, data_dir):
    """Five kills at seeded random instants; checkpoints are stretched with sleeps at three
    persistence steps so a fair share of the kills lands inside one."""
    stretch = ("checkpoint::before_flush=sleep:80,snapshot::before_rename=sleep:80,"
               "checkpoint::before_prune=sleep:80")
    node = make_node(shards=2, data_dir=data_dir,
                     env=dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS=stretch))
    fsync_topics, disk_topic = spread_topics("cf", 2), "cdisk"
    make_topics(node, fsync_topics, [disk_topic])
    stop = threading.Event()
    writers = start_writers(node, fsync_topics * 2, stop, pad=200, pause_s=0.005)
    writers += start_writers(node, [disk_topic], stop, first_ident=100, batch=8, pad=400,
                             pause_s=0.002)
    wait_acked(writers, 10, "writers to get going")

    rng = random.Random(SEED)
    killed = []
    for kill in range(5):
        proc = wait_compactor_ready(node, kill + 1)
        wait_checkpoints(node, 1)      # this incarnation checkpoints before it is killed
        stop.wait(rng.uniform(0.2, 1.0))
        os.kill(proc["pid"], signal.SIGKILL)
        killed.append(proc["pid"])
    back = wait_compactor_ready(node, 6)
    assert back["pid"] not in killed
    assert node.log().count("child=compactor-00 state=down exit_code=-9") == 5
    wait_checkpoints(node, 1)
    wait_acked(writers, 5, "writers to continue after the last restart")
    finish(writers, stop)
    assert node.stop() == 0
    assert_log_clean(node)

    snaps = snapshot_ids(data_dir)
    assert snaps and snaps[0] > 5, f"too few checkpoints: {snaps}"
    assert [p for p in segment_files(data_dir).values() if "data" in p], "no segment files"
    wal = wal_idxs(data_dir)
    assert any(idxs and idxs[0] > 1 for idxs in wal.values()), f"no WAL file removed: {wal}"
    assert_no_orphan_segments(data_dir)

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers)
    assert node.stop() == 0
    assert_log_clean(node)


# --- K-COMPACTOR-2: exactly at each persistence step ---------------------------------------

PERSISTENCE_STEPS = ["segput::after_data_before_idx", "checkpoint::before_flush",
                     "snapshot::before_rename", "snapshot::after_rename",
                     "checkpoint::before_prune"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", PERSISTENCE_STEPS)
def test_sigkill_compactor_at_persistence_step(make_node, data_dir, site):
    node = make_node(shards=2, data_dir=data_dir,
                     env=dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS=f"{site}=kill"))
    fsync_topics, disk_topic = spread_topics("pf", 1), "pdisk"
    make_topics(node, fsync_topics, [disk_topic])
    stop = threading.Event()
    writers = start_writers(node, fsync_topics * 2, stop, pad=100)
    writers += start_writers(node, [disk_topic], stop, first_ident=100, batch=20, pad=300)
    wait_for(lambda: "child=compactor-00 state=down exit_code=-9" in node.log(), 30,
             f"the compactor to die at {site}")
    wait_for(lambda: compactor(node)["incarnation"] >= 2, 30, "the compactor's restart")
    wait_acked(writers, 5, "writers to continue after the compactor died")
    finish(writers, stop)
    node.stop()
    assert_log_clean(node)
    if site == "snapshot::before_rename":
        meta = os.listdir(os.path.join(data_dir, "meta"))
        assert [n for n in meta if n.endswith(".bin.tmp")], f"no temp snapshot left: {meta}"
    if site in ("snapshot::after_rename", "checkpoint::before_prune"):
        assert snapshot_ids(data_dir), "the killed checkpoint's snapshot was renamed"

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers)
    before, base = snapshot_ids(data_dir), len(checkpoints_logged(node))
    more = start_writers(node, fsync_topics + [disk_topic], threading.Event(),
                         first_ident=200, limit=20)
    finish(more, threading.Event())   # each ends after `limit` appends
    wait_checkpoints(node, 1, base)
    assert node.stop() == 0
    assert_log_clean(node)
    assert snapshot_ids(data_dir)[0] > (before[0] if before else 0)
    assert_no_orphan_segments(data_dir)

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers + more)
    assert node.stop() == 0
    assert_log_clean(node)
