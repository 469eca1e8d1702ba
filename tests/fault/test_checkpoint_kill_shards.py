"""Fault: shards killed during checkpoints, a clean stop's final checkpoint, and shard-count
changes with checkpoints (and one kill -9 of the whole node) in between.

Fault K-SHARD-CKPT-1: kill -9 of a shard after it took a snapshot in but before it removed
the WAL files that snapshot made obsolete (failpoint absorb::before_wal_remove=kill); the
files must go at a later checkpoint, and the compactor, waiting for replies that never come,
must not be killed as hung meanwhile.
Fault K-SHARD-CKPT-2: kill -9 of a shard at seeded random instants while the compactor
checkpoints about every second (stretched by sleeps) under load.
Fault K-STOP-TAIL: SIGTERM after thousands of writes: the compactor's final checkpoint makes
the next start replay only a short tail.
Fault K-RESHARD: 1 -> 3 -> 2 shards with checkpoints in between and a kill -9 of the node.

Asserted (after a restart without failpoints): every acked write present exactly once with
identical content (the Client retries through shard restarts with session keys), nothing
fabricated, per-writer order kept, fsync-class seqs dense with an exact head (disk topics
may show holes after a crash: head reservations); retired WAL groups go away.

The writers, the oracle and the probes come from checkpoint_harness.py.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading

import pytest

from tests.fault.checkpoint_harness import (
    FAST_CHECKPOINTS, MIB, SEED, assert_log_clean, check_oracle, checkpoints_logged, compactor,
    finish, make_topics, spread_topics, start_writers, wait_acked, wait_checkpoints,
    wait_shard_ready, wal_idxs,
)
from tools.testing.node_harness import names_on
from tools.testing.node_harness import wait_for
from topics_actors.storage.fs import RealFs
from topics_actors.storage.snapshot import load_newest
from topics_actors.storage.wal_layout import list_wal_files

REPLAYED_RE = re.compile(r"event=replayed shard=(\d+) snapshot=(\d+) frames=(\d+)")
RETIRED_RE = re.compile(r"event=checkpoint .*retired_groups_removed=(\d+)")


def shard_kills_logged(node, shard: int) -> int:
    return node.log().count(f"child=shard-{shard:02d} state=down exit_code=-9")


# --- K-SHARD-CKPT-1: a shard dies between taking a snapshot in and removing WAL files -------

def positions_of_newest(data_dir: str) -> dict[str, int]:
    """Group key -> WAL file idx of the newest snapshot's position."""
    _, body = load_newest(RealFs(), data_dir)
    return {key: position[0] for key, position in body["positions"].items()}


def wal_files_below(data_dir: str, positions: dict[str, int]) -> list[str]:
    """Current-layout WAL files below the given positions (own groups only)."""
    below = []
    for key, idx in positions.items():
        directory = os.path.join(data_dir, "wal", key.split("/")[1])
        below += [path for file_idx, path in list_wal_files(RealFs(), directory)
                  if file_idx < idx]
    return below


@pytest.mark.timeout(60)
def test_shard_killed_before_removing_absorbed_wal(make_node, data_dir):
    """A shard removes the WAL files below the previous snapshot's position when it takes a
    new one in. Run 1 fills several WAL files and stops (its final checkpoint is snapshot 1,
    so nothing could be removed yet); run 2 arms the kill, so shard 0 dies at its first
    `absorbed` with those files still there; run 3 (no failpoint) must read everything and
    remove them. Run 2 is killed as a whole once shard 0 has died and come back (a clean stop
    would have its final checkpoint kill the shards again and wait for their replies)."""
    fsync_topics, disk_topic = spread_topics("af", 1), names_on(0, 1, "adisk")[0]
    node = make_node(shards=2, data_dir=data_dir,
                     env={"TOPICS_WAL_FILE_BYTES": str(MIB), "TOPICS_SEGMENT_MAX_EVENTS": "50"})
    make_topics(node, fsync_topics, [disk_topic])
    writers = start_writers(node, fsync_topics, threading.Event(), pad=100, limit=100)
    writers += start_writers(node, [disk_topic], threading.Event(), first_ident=100,
                             batch=8, pad=3000, limit=250)
    finish(writers, threading.Event())
    assert node.stop() == 0
    assert_log_clean(node)
    positions = positions_of_newest(data_dir)
    left = wal_files_below(data_dir, {k: v for k, v in positions.items() if "shard-00" in k})
    assert left, f"shard 0 has no WAL file below snapshot 1: {positions} {wal_idxs(data_dir)}"

    env = dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS="absorb::before_wal_remove=kill")
    node = make_node(shards=2, data_dir=data_dir, env=env)
    stop = threading.Event()
    load = start_writers(node, fsync_topics * 2 + [disk_topic], stop, first_ident=200,
                         pad=100, pause_s=0.003)
    wait_for(lambda: shard_kills_logged(node, 0) >= 1, 30, "shard 0 to die in absorption")
    wait_shard_ready(node, 0, 2)
    wait_acked(load, 10, "writers to continue after shard 0 came back")
    finish(load, stop)
    writers += load
    node.kill_group()
    assert_log_clean(node)
    assert all(os.path.exists(p) for p in left), "WAL files went before the kill"

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers, holes_ok=(disk_topic,))
    base = len(checkpoints_logged(node))
    more = start_writers(node, fsync_topics + [disk_topic], threading.Event(),
                         first_ident=300, limit=20)
    finish(more, threading.Event())
    wait_checkpoints(node, 1, base)
    remaining = [p for p in left if os.path.exists(p)]
    assert not remaining, f"WAL files the killed shard left were never removed: {remaining}"
    check_oracle(node.client(), writers + more, holes_ok=(disk_topic,))
    assert node.stop() == 0
    assert_log_clean(node)


@pytest.mark.timeout(60)
def test_compactor_outlives_shards_dying_during_absorbed(make_node, data_dir):
    """Both shards die in the compactor's `absorbed` calls and come back at once. The
    compactor waits for replies that never come; it must keep heartbeating meanwhile, or the
    supervisor kills it as hung (with a 4 s heartbeat timeout a single silent call used to
    be enough: no beat between calls, 5 s request timeout)."""
    env = dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS="absorb::before_wal_remove=kill",
               TOPICS_HEARTBEAT_TIMEOUT_MS="4000")
    node = make_node(shards=2, data_dir=data_dir, env=env)
    make_topics(node, ["hb0", "hb1"], [])
    writers = start_writers(node, ["hb0", "hb1"], threading.Event(), limit=20)
    finish(writers, threading.Event())
    wait_for(lambda: "event=checkpoint snapshot=1" in node.log()
             or "child_killed child=compactor-00" in node.log(), 30,
             "the first checkpoint to end, or the compactor to be killed")
    log = node.log()
    assert "child_killed child=compactor-00" not in log, log[-2000:]
    assert shard_kills_logged(node, 0) >= 1 and shard_kills_logged(node, 1) >= 1
    assert compactor(node)["incarnation"] == 1
    check_oracle(node.client(), writers)
    node.kill_group()    # a clean stop would kill both shards again in the final checkpoint
    assert_log_clean(node)


# --- K-SHARD-CKPT-2: random instants ------------------------------------------------------

@pytest.mark.timeout(60)
def test_sigkill_shard_at_random_instants_during_checkpoints(make_node, data_dir):
    stretch = ("checkpoint::before_flush=sleep:100,snapshot::after_rename=sleep:100,"
               "absorb::before_wal_remove=sleep:30")
    node = make_node(shards=2, data_dir=data_dir,
                     env=dict(FAST_CHECKPOINTS, TOPICS_FAILPOINTS=stretch))
    fsync_topics, disk_topic = spread_topics("rf", 2), "rdisk"
    make_topics(node, fsync_topics, [disk_topic])
    stop = threading.Event()
    writers = start_writers(node, fsync_topics, stop, pad=100, pause_s=0.003)
    writers += start_writers(node, [disk_topic], stop, first_ident=100, batch=8, pad=300,
                             pause_s=0.003)
    wait_acked(writers, 10, "writers to get going")

    rng = random.Random(SEED)
    incarnations = {0: 1, 1: 1}
    for shard in (0, 1, 0):
        wait_checkpoints(node, 1)
        stop.wait(rng.uniform(0.0, 1.0))
        victim = node.shard_pid(shard)
        os.kill(victim, signal.SIGKILL)
        incarnations[shard] += 1
        back = wait_shard_ready(node, shard, incarnations[shard])
        assert back["pid"] != victim
        wait_acked(writers, 5, f"writers to continue after shard {shard} came back")
    wait_checkpoints(node, 1)
    finish(writers, stop)
    assert [shard_kills_logged(node, s) for s in (0, 1)] == [2, 1]
    assert node.stop() == 0
    assert_log_clean(node)

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers, holes_ok=(disk_topic,))
    assert node.stop() == 0
    assert_log_clean(node)


# --- K-STOP-TAIL: the final checkpoint of a clean stop ------------------------------------

@pytest.mark.timeout(60)
def test_sigterm_final_checkpoint_leaves_a_short_tail(make_node, data_dir):
    env = {"TOPICS_WAL_FILE_BYTES": str(MIB)}      # checkpoints only every 60 s or 64 MiB
    node = make_node(shards=2, data_dir=data_dir, env=env)
    fsync_topics, disk_topics = spread_topics("sf", 1), spread_topics("sd", 1)
    make_topics(node, fsync_topics, disk_topics)
    writers = start_writers(node, fsync_topics + disk_topics, threading.Event(),
                            batch=100, pad=50, limit=50)
    finish(writers, threading.Event())
    written = sum(len(w.acked) for w in writers)
    assert written >= 4000
    assert checkpoints_logged(node) == [], "a checkpoint before the stop"
    assert node.stop() == 0
    log = node.log()
    stopping = log.find("event=stopping")
    assert 0 <= stopping < log.find("event=checkpoint snapshot=1", stopping), log[-3000:]

    node = make_node(shards=2, data_dir=data_dir, env=env)
    replayed = {int(s): (int(snap), int(frames))
                for s, snap, frames in REPLAYED_RE.findall(node.log())}
    assert sorted(replayed) == [0, 1], node.log()
    for shard, (snap, frames) in replayed.items():
        assert snap == 1 and frames < 100, f"shard {shard} replayed {frames} frames"
    assert sum(check_oracle(node.client(), writers).values()) == written
    assert node.stop() == 0
    assert_log_clean(node)


# --- K-RESHARD: shard-count changes with checkpoints and a kill -9 -------------------------

def reshard_step(make_node, data_dir: str, shards: int, writers: list, ident: int,
                 holes_ok: tuple[str, ...]):
    """Start with `shards`, check everything so far, append more to every topic, wait for a
    checkpoint that covers the new writes. Returns the node and the new writers."""
    node = make_node(shards=shards, data_dir=data_dir, env=FAST_CHECKPOINTS)
    client = node.client()
    check_oracle(client, writers, holes_ok)
    base = len(checkpoints_logged(node))
    more = start_writers(node, sorted({w.topic for w in writers}), threading.Event(),
                         first_ident=ident, batch=4, pad=200, limit=40)
    finish(more, threading.Event())
    wait_checkpoints(node, 1, base)
    return node, more


def retired_dirs(data_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(data_dir, "wal"))
                  if n.startswith("retired-"))


@pytest.mark.timeout(90)
def test_shard_count_changes_with_checkpoints_and_a_node_kill(make_node, data_dir):
    fsync_topics = [f"mf{i}" for i in range(4)]
    disk_topics = ["md0", "md1"]
    node = make_node(shards=1, data_dir=data_dir, env=FAST_CHECKPOINTS)
    make_topics(node, fsync_topics, disk_topics)
    writers = start_writers(node, fsync_topics + disk_topics, threading.Event(),
                            batch=4, pad=200, limit=60)
    finish(writers, threading.Event())
    wait_checkpoints(node, 1, 0)
    assert node.stop() == 0
    assert_log_clean(node)

    node, more = reshard_step(make_node, data_dir, 3, writers, 100, ())
    writers += more
    tail = start_writers(node, fsync_topics + disk_topics, threading.Event(),
                         first_ident=150, batch=4, pad=200, limit=20)
    finish(tail, threading.Event())                # acked, not yet in any checkpoint
    writers += tail
    node.kill_group()                              # kill -9 of the supervisor and every child
    assert_log_clean(node)
    assert "layout_generation=2" in node.log()
    logs = [node.log()]

    node, more = reshard_step(make_node, data_dir, 2, writers, 200, tuple(disk_topics))
    writers += more
    assert "layout_generation=3" in node.log()
    stop = threading.Event()
    load = start_writers(node, fsync_topics[:2], stop, first_ident=300, pause_s=0.01)
    wait_for(lambda: not retired_dirs(data_dir), 30, "retired WAL groups to be removed")
    finish(load, stop)
    writers += load
    check_oracle(node.client(), writers, tuple(disk_topics))
    assert node.stop() == 0
    assert_log_clean(node)
    # Gen 2's three groups were retired at this start, so this run removed them (gen 1's
    # one group went in this run or the killed one).
    removed = [int(n) for n in RETIRED_RE.findall(node.log())]
    assert 3 <= sum(removed) + sum(int(n) for n in RETIRED_RE.findall(logs[0])) <= 4, removed
    assert sum(removed) >= 3, removed

    node = make_node(shards=2, data_dir=data_dir, env=FAST_CHECKPOINTS)
    check_oracle(node.client(), writers, tuple(disk_topics))
    assert node.stop() == 0
    assert_log_clean(node)
