"""A diverged copy heals in place (docs/CLUSTER.md, "When a copy diverged"; spec/replication.md
D4, D5; KIP-101): three nodes and a real ZooKeeper.

Method: the leader takes `acks: leader` writes while its followers' shards are stopped
(SIGSTOP), so only it holds them; it is killed (kill -9 of its node) before they run again;
a new leader is elected from the ISR and takes `acks: all` writes at the same seqs; the old
node comes back with its data dir. It must cut its copy back to where the logs part (the
shard's replication figures count one in-place cut and no whole-copy reset), its copy must
then equal the leader's record by record (tools/testing/replica_copy.py), and no `acks:
all` write may be lost.
"""

import os
import re
import signal

import orjson
import pytest

from tools.testing.cluster_harness import (
    Writer, cluster_env, converged, wait_caught_up, wait_isr,
)
from tools.testing.node_harness import wait_for
from topics_actors.storage import snapshot
from topics_actors.storage.fs import RealFs
from topics_actors.topic_identity import shard_of_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHARDS = 2
TOPIC = "diverge"
# Supervisors wait a minute for a silent shard (the stopped ones are not restarted), and
# no checkpoint runs during the test: the divergent records stay in the WAL, so the cut
# is made in place (a checkpoint absorbing them would make it a whole-copy reset).
ENV = {"TOPICS_HEARTBEAT_TIMEOUT_MS": "60000", "TOPICS_CHECKPOINT_INTERVAL_MS": "600000"}


def figures(node) -> dict:
    """The replication figures of the shard of `node` that owns TOPIC."""
    with node.client() as client:
        statuses = client.shard_statuses()
    return statuses[shard_of_name(TOPIC, SHARDS)]["replication"]


def diverge_and_return(make_node, zk_connect, observer, env: dict, before_kill=None):
    """The whole story up to the old node caught up again: (nodes, old node id, every
    `acks: all` write acked {seq: n}, the returned node)."""
    cluster = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid, **env))
               for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3 and all(
        info.get("shards") for info in observer.nodes().values()), 30, "three registrations")
    cluster["a"].client().put_topic(TOPIC, replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], TOPIC, 3)
    state = observer.read(TOPIC).state
    old = state.leader
    acked = {}
    client = cluster[old].client()
    for n in range(1, 201):
        acked[client.append(TOPIC, [{"data": {"n": n}}], acks="all")["first_seq"]] = n
    stopped = [cluster[nid].shard_pid(shard_of_name(TOPIC, SHARDS))
               for nid in state.replicas if nid != old]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        for n in range(1, 101):         # on the old leader alone: never on every ISR member
            client.append(TOPIC, [{"data": {"alone": n}}], acks="leader")
        if before_kill is not None:
            before_kill(cluster[old])
        cluster[old].kill_group()
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    new = wait_for(lambda: (s := observer.read(TOPIC).state).leader not in (None, old)
                   and s, 30, "a new leader")
    writer = Writer(cluster[new.leader], TOPIC)
    writer.start()
    wait_for(lambda: len(writer.acked) >= 150, 60, "acked writes to the new leader")
    wait_for(lambda: old not in observer.nodes(), 30, "the old session gone")
    returned = make_node(shards=SHARDS, data_dir=cluster[old].data_dir,
                         env=cluster_env(zk_connect, old, **env))
    nodes = {**cluster, old: returned}
    wait_isr(nodes[new.leader], TOPIC, 3, timeout_s=60)
    writer.stop()
    wait_caught_up(nodes[new.leader], TOPIC)
    assert min(writer.acked) <= 300     # the new leader re-used seqs the old one had written
    return nodes, old, {**acked, **writer.acked}, returned


def alone_seqs(copy: dict) -> list[int]:
    """The seqs of a copy holding one of the old leader's own writes."""
    return sorted(seq for seq, envelope in copy.items()
                  if "alone" in orjson.loads(envelope)["d"])


def test_a_diverged_old_leader_cuts_its_copy_in_place_and_converges(make_node, zk_connect,
                                                                    observer):
    nodes, _old, acked, returned = diverge_and_return(make_node, zk_connect, observer, ENV)
    healed = figures(returned)
    assert (healed["copies_truncated"], healed["copies_reset"]) == (1, 0), healed
    metrics = returned.http("GET", "/v0/metrics").body.decode()
    assert re.search(r"^topics_replica_truncations_total 1$", metrics, re.M), metrics
    assert re.search(r"^topics_replica_resets_total 0$", metrics, re.M)
    cut = re.search(r"event=replica_truncated topic=diverge head=(\d+) last=(\d+) "
                    r"records=(\d+)", returned.log())
    assert cut is not None and int(cut.group(1)) == 300   # 200 acked + 100 its own alone
    last, dropped = int(cut.group(2)), int(cut.group(3))
    assert 200 <= last < 300 and dropped == 300 - last
    copy = converged(nodes, SHARDS, TOPIC, acked)      # identical copies, 0 acked writes lost
    # The records after the cut are gone from every copy (a follower may have fetched the
    # first of the old leader's own writes before it stopped: those are kept, in order).
    assert alone_seqs(copy) == list(range(201, last + 1))


def test_a_diverged_copy_partly_in_segments_is_fetched_again_whole(make_node, zk_connect,
                                                                    observer):
    """The same story, but the old leader's compactor absorbs its own writes into segments
    before it dies: the copy cannot be cut in place and is fetched again whole."""
    env = {**ENV, "TOPICS_CHECKPOINT_INTERVAL_MS": "100"}

    def absorb(node) -> None:           # a snapshot on disk past the old leader's writes
        def absorbed() -> int:
            found = snapshot.load_newest(RealFs(), node.data_dir, snapshot.BODY_KEYS)
            entries = found[1]["topics"] if found else []
            return max([e["absorbed"] for e in entries if e["name"] == TOPIC] or [0])
        wait_for(lambda: absorbed() >= 300, 30, "a checkpoint of the old leader's writes")
    nodes, _old, acked, returned = diverge_and_return(make_node, zk_connect, observer, env,
                                                      absorb)
    healed = figures(returned)
    assert (healed["copies_truncated"], healed["copies_reset"]) == (0, 1), healed
    assert re.search(r"event=replica_reset topic=diverge head=\d+ ops_applied=0 "
                     r"reason=absorbed", returned.log())
    copy = converged(nodes, SHARDS, TOPIC, acked)
    assert len(alone_seqs(copy)) < 100
