"""The fault kinds: fault(cluster, rng) strikes a seeded random victim of the LabCluster,
holds the fault a while under load, undoes it and returns a line saying what it did. The
loop then waits until the cluster has healed (tools/cluster_crashtest/fault_loop.py).

    partition     one node cut from everyone (nodes, ZooKeeper, clients); or a minority
                  node split from the majority, ZooKeeper on a random side; or a follower
                  cut from its leader only (it still sees ZooKeeper)
    partition_zk  a topic's leader cut from ZooKeeper only: clients and the other nodes
                  still reach it
    asymmetric    one direction of one link dropped: leader -> follower, follower ->
                  leader, a node -> ZooKeeper or ZooKeeper -> a node
    slow_link     a node's link loses 5-30 % of its packets and is slowed (tc netem delay
                  where the kernel has sch_netem, else a tbf rate limit)
    power_loss    one node, or every node at once: kill -9 and LazyFS drops every byte not
                  fsynced, then the nodes start again on what the disk kept
    pause         SIGSTOP of a node until its session ended (or for less than a session
                  timeout), then SIGCONT
    kill          kill -9 of a whole node (restarted on its data dir), of one WAL shard
                  (its supervisor restarts it), or of ZooKeeper (started again at once)
    disk_full     the small-disk node's file system filled to the last block under load,
                  then freed: writes there are refused with insufficient_storage, reads go
                  on, and writes resume without a restart

clock_jump does not apply: replication decides nothing by the wall clock (ISR lag and
every timeout are monotonic, sessions are ZooKeeper's ticks); record timestamps and TTLs
read it, and neither is part of this oracle (docs/FAULT_TESTING.md).
"""

from __future__ import annotations

import random
import signal
import time

from tools.cluster_crashtest import fault_table
from tools.jepsen.lab_cluster import LabCluster
from tools.testing.cluster_harness import cluster_view, wait_unregistered
from tools.testing.disk_filler import DiskFiller
from tools.testing.node_harness import names_on, wait_for

HOLD_S = (1.5, 6.0)           # how long a network fault lasts
FULL_S = (2.0, 6.0)           # how long a disk stays full once it refused a write
FILL_WAIT_S = 60
FULL = "insufficient_storage"
SHORT_PAUSE_S = (0.1, 0.6)    # below the 1 s session timeout
SESSION_END_WAIT_S = 30
CACHE_FULL_PERCENT = 99


def _hold(rng: random.Random) -> float:
    held = rng.uniform(*HOLD_S)
    time.sleep(held)
    return held


def _roles(cluster: LabCluster, rng: random.Random) -> tuple[str, str, str]:
    """(topic, its leader, one of its followers) for a random topic, as a node sees it."""
    topic = rng.choice(sorted(cluster.topics))
    for node in cluster.nodes.values():
        view = cluster_view(node)
        state = view and view["topics"].get(topic)
        if state and state.get("leader"):
            followers = sorted(set(state["replicas"]) - {state["leader"]})
            return topic, state["leader"], rng.choice(followers)
    raise RuntimeError("no node names a leader")


def _held(cluster: LabCluster, rng: random.Random, what: str) -> str:
    cluster.note(f"network: {cluster.lab.describe()}")
    try:
        held = _hold(rng)
    finally:
        cluster.lab.heal()
    return f"{what} for {held:.1f}s, healed"


def partition(cluster: LabCluster, rng: random.Random) -> str:
    nodes = sorted(cluster.nodes)
    shape = rng.choice(("isolated", "split", "follower_from_leader"))
    if shape == "isolated":
        victim = rng.choice(nodes)
        cluster.lab.isolate(victim)
        what = f"{victim} isolated from every node, ZooKeeper and the clients"
    elif shape == "split":
        minority = rng.choice(nodes)
        zk_side = rng.choice(("majority", "minority"))
        for other in nodes:
            if other != minority:
                cluster.lab.cut(minority, other)
        cut_from_zk = [minority] if zk_side == "majority" else \
            [n for n in nodes if n != minority]
        for nid in cut_from_zk:
            cluster.lab.cut(nid, "zk")
        what = f"{minority} split from the other nodes, ZooKeeper with the {zk_side}"
    else:
        topic, leader, follower = _roles(cluster, rng)
        cluster.lab.cut(leader, follower)
        what = f"{follower} cut from {leader} (leader of {topic}), both see ZooKeeper"
    return _held(cluster, rng, what)


def partition_zk(cluster: LabCluster, rng: random.Random) -> str:
    topic, leader, _ = _roles(cluster, rng)
    cluster.lab.cut(leader, "zk")
    return _held(cluster, rng, f"{leader} (leader of {topic}) cut from ZooKeeper only")


def asymmetric(cluster: LabCluster, rng: random.Random) -> str:
    topic, leader, follower = _roles(cluster, rng)
    src, dst = rng.choice(((leader, follower), (follower, leader), (leader, "zk"),
                           ("zk", leader), (follower, "zk"), ("zk", follower)))
    cluster.lab.block(src, dst)
    return _held(cluster, rng, f"packets {src} -> {dst} dropped, the other way open "
                               f"({leader} leads {topic})")


def slow_link(cluster: LabCluster, rng: random.Random) -> str:
    victim = rng.choice(sorted(cluster.nodes))
    loss = rng.randint(5, 30)
    delay_ms, rate_kbit = rng.randint(20, 200), rng.choice((512, 1024, 4096))
    cluster.lab.set_loss(victim, loss)
    cluster.lab.set_slow(victim, delay_ms, rate_kbit)
    slowed = (f"{delay_ms} ms delay" if cluster.lab.netem else
              f"{rate_kbit} kbit/s (no sch_netem in this kernel)")
    return _held(cluster, rng, f"{victim}: {loss}% packet loss, {slowed}")


def power_loss(cluster: LabCluster, rng: random.Random) -> str:
    """kill -9, then LazyFS drops what was not fsynced; a node not on LazyFS (the
    small-disk one) is only killed."""
    powered = sorted(cluster.lazy)
    if not powered:
        raise RuntimeError("no node is on LazyFS")
    share = cluster.every_node_power_share
    victims = powered if rng.random() < share else [rng.choice(powered)]
    everyone = len(victims) == len(powered)
    if everyone:
        victims = sorted(cluster.nodes)
    for nid in victims:                      # as close to one instant as we can
        cluster.nodes[nid].kill_group()
    cluster.note("power loss of every node" if everyone else f"power loss of {victims[0]}")
    dropped, full = [], []
    for nid in victims:
        if nid in cluster.lazy:
            mount = cluster.lazy[nid]
            unsynced, usage = mount.unsynced_bytes(), mount.cache_usage()
            mount.power_loss()
            dropped.append(f"{nid} {unsynced} B, cache {usage:.0f}% full")
            full += [nid] if usage >= CACHE_FULL_PERCENT else []
    if everyone:       # taken once no node runs: an ack that arrives before it was sent before
        cluster.all_power_losses.append(time.monotonic())
    if not everyone:
        wait_unregistered(cluster.nodes, victims[0], SESSION_END_WAIT_S)
    ready = {nid: cluster.restart_node(nid) for nid in victims}
    if full:
        raise AssertionError(f"LazyFS's cache of {', '.join(full)} was full: writes went "
                             "straight to disk, so the power loss dropped too little")
    shown = ", ".join(f"{nid} {s:.1f}s" for nid, s in ready.items())
    return (f"{'every node' if everyone else victims[0]} lost power (unsynced bytes dropped: "
            f"{', '.join(dropped)}); ready again: {shown}")


def pause(cluster: LabCluster, rng: random.Random) -> str:
    if rng.random() < 0.6:
        return fault_table.node_pause(cluster, rng)
    nid = rng.choice(sorted(cluster.nodes))
    cluster.signal_node(nid, signal.SIGSTOP)
    try:
        held = rng.uniform(*SHORT_PAUSE_S)
        time.sleep(held)
    finally:
        cluster.signal_node(nid, signal.SIGCONT)
    return f"{nid}: SIGSTOP for {held:.2f}s (within its session), SIGCONT"


def kill(cluster: LabCluster, rng: random.Random) -> str:
    which = rng.choice(("node", "shard", "zookeeper"))
    if which == "node":
        return "node " + fault_table.node_kill(cluster, rng)
    if which == "shard":
        return "shard " + fault_table.shard_kill(cluster, rng)
    return fault_table.zk_kill_short(cluster, rng)


def disk_full(cluster: LabCluster, rng: random.Random) -> str:
    """Fill the small-disk node's file system while a DiskFiller writes large batches to
    single-copy topics there (its WAL files rotate every few appends, so the full disk shows
    at once): the writes are refused with `insufficient_storage` and nothing else, reads
    there go on, and once the ballast is gone the filler is acked again with no restart."""
    if not cluster.disks:
        raise RuntimeError("no node is on a small disk")
    nid = rng.choice(sorted(cluster.disks))
    disk, node = cluster.disks[nid], cluster.nodes[nid]
    admin = node.client(request_timeout_ms=5000, retry_deadline_ms=20_000)
    cluster.fills += 1
    topics = [names_on(shard, 1, f"fill{cluster.fills}x", cluster.shards)[0]
              for shard in range(cluster.shards)]
    for topic in topics:
        admin.put_topic(topic, durability="disk", replication_factor=1)
    filler = DiskFiller(node, topics)
    filler.start()
    try:
        wait_for(lambda: filler.acked, FILL_WAIT_S, "the filler's first ack")
        free_before, ballast = disk.free_bytes(), disk.fill()
        cluster.note(f"disk of {nid} full")
        try:
            wait_for(lambda: filler.errors, FILL_WAIT_S, "a write refused by the full disk")
            if set(filler.errors) != {FULL}:
                raise AssertionError(f"{nid} answered a full disk with {dict(filler.errors)}")
            admin.diff(topics[0], from_seq=0, limit=1)      # reads go on
            held = rng.uniform(*FULL_S)
            time.sleep(held)
        finally:
            disk.free()
        freed = time.monotonic()
        wait_for(lambda: filler.last_ack_s > freed, FILL_WAIT_S,
                 f"writes on {nid} to resume without a restart")
        resumed_s = filler.last_ack_s - freed
    finally:
        filler.stop()
    for topic in topics:
        admin.delete_topic(topic)
    return (f"{nid}: {free_before // 1024} KiB free filled by a {ballast // 1024} KiB "
            f"ballast for {held:.1f}s: {sum(filler.errors.values())} writes refused "
            f"{FULL}, reads served; freed, writes acked again {resumed_s:.1f}s later with "
            "no restart")



FAULTS = {
    "partition": partition,
    "partition_zk": partition_zk,
    "asymmetric": asymmetric,
    "slow_link": slow_link,
    "power_loss": power_loss,
    "pause": pause,
    "kill": kill,
    "disk_full": disk_full,
}
