"""Moving replicas between nodes (docs/CLUSTER.md 8, cluster/reassignment.py) on three real
nodes and a real ZooKeeper: a topic's copies moved off its leader onto the third node with
`topics cluster move`, then that node drained with `topics cluster drain`, both under
`acks: all` writers that retry with their keys and a reader that never stops. Checked:
every acked write at its seq exactly once on the final copies, the copies equal (the
checksum route and the stopped copies), every record a reader saw still there, no read
failed, the moved-off copies dropped. TOPICS_TEST_HEAVY=1 adds a fourth node joining
(three topics, one of them of one copy, moved onto it and drained) and a dead node
drained, whose copy goes when it returns."""

import io
import os
import signal
import sys
import threading

import pytest

from supervisor import cli
from tools.testing.cluster_harness import (
    OnceWriter, cluster_env, converged, once_violations, replication, wait_isr,
)
from tools.testing.node_harness import wait_for
from tools.testing.replica_copy import topic_copy
from topics_actors.errors import TopicsError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHARDS = 1
HEAVY = bool(os.environ.get("TOPICS_TEST_HEAVY"))


@pytest.fixture
def cluster(make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid, session_ms=4000))
             for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3 and all(
        info.get("shards") for info in observer.nodes().values()), 30, "three registrations")
    return nodes


class Reader(threading.Thread):
    """Reads the topic from the start, again and again, through one node: every record
    it saw ({seq: number}) must survive, and no read may fail."""

    def __init__(self, node, topic: str):
        super().__init__(daemon=True)
        self.client = node.client(request_timeout_ms=2000, retry_deadline_ms=20_000)
        self.topic, self.seen, self.failures, self.reads = topic, {}, [], 0
        self.halt = threading.Event()

    def run(self) -> None:
        cursor = 0
        while not self.halt.is_set():
            try:
                reply = self.client.diff(self.topic, from_seq=cursor, limit=200, wait_ms=50)
            except TopicsError as error:
                self.failures.append(repr(error))
                continue
            self.reads += 1
            for record in reply["records"]:
                seen = self.seen.setdefault(record["$seq"], record["data"]["n"])
                if seen != record["data"]["n"]:
                    self.failures.append(f"seq {record['$seq']}: {seen}, then "
                                         f"{record['data']['n']}")
            cursor = reply["next_from_seq"]

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def topics(capsys, node, *argv: str) -> tuple[int, str, str]:
    """One `topics` verb run in process against `node`."""
    capsys.readouterr()
    sys.stdin = io.StringIO("")
    code = cli.main(["--url", f"http://127.0.0.1:{node.http_port}", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def moved(observer, topic: str, nodes: set[str]) -> bool:
    state = observer.read(topic).state
    return state.target is None and set(state.replicas) == nodes and set(state.isr) == nodes


def test_a_topic_moves_off_its_leader_and_a_node_drains_under_writes(
        cluster, observer, capsys):
    """The move's phases come and go within one poll of the verb at this size: only its
    last line is checked; the state is checked in ZooKeeper."""
    client = cluster["a"].client()
    client.put_topic("moving", replication_factor=2, durability="fsync")
    before = observer.read("moving").state
    wait_isr(cluster["a"], "moving", 2)
    spare = next(n for n in "abc" if n not in before.replicas)
    kept = next(n for n in before.replicas if n != before.leader)
    writer = OnceWriter(cluster[spare], "moving", threads=2)
    reader = Reader(cluster[kept], "moving")
    writer.start()
    reader.start()
    try:
        wait_for(lambda: len(writer.acked) >= 30, 60, "acked writes before the move")
        refused = cluster["a"].http("POST", "/v0/cluster/move",
                                    {"topic": "moving", "replicas": [kept, "nowhere"]})
        assert refused.status == 503 and "not live" in refused.json()["error"]["message"]
        code, out, err = topics(capsys, cluster["a"], "cluster", "move", "moving",
                                "--to", f"{kept},{spare}", "--timeout", "90")
        assert code == 0, (out, err)
        last = out.rstrip().splitlines()[-1]
        assert last.startswith(f"moving: done: replicas {kept},{spare}"), out
        after = observer.read("moving").state
        assert after.replicas == (kept, spare) and after.leader in (kept, spare)
        assert after.leader_epoch == before.leader_epoch + 1      # leadership moved once
        wait_for(lambda: topic_copy_gone(cluster[before.leader], "moving"), 30,
                 "the old leader's copy dropped")
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + 30, 60, "acked writes after the move")

        code, out, err = topics(capsys, cluster["b"], "cluster", "drain", spare,
                                "--timeout", "90")
        assert code == 0, (out, err)
        assert moved(observer, "moving", {kept, before.leader}), observer.read("moving")
        assert observer.draining() == {spare}
        wait_for(lambda: topic_copy_gone(cluster[spare], "moving"), 30,
                 "the drained node's copy dropped")      # it learns the drain on its own
        client.put_topic("later", replication_factor=2)     # no new copy on a drained node
        assert set(observer.read("later").state.replicas) == {kept, before.leader}
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + 30, 60, "acked writes after the drain")
    finally:
        writer.stop()
        reader.stop()
    compared = cluster["a"].http("GET", "/v0/topics/moving/checksum").json()
    assert compared["agree"] and set(compared["copies"]) == {kept, before.leader}, compared
    final = {n: cluster[n] for n in (kept, before.leader)}
    cluster[spare].stop()
    assert topic_copy(cluster[spare].data_dir, SHARDS, "moving") is None
    copy = converged(final, SHARDS, "moving", writer.acked)     # 0 acked writes lost
    assert once_violations(copy, writer) == []
    lost = {seq: n for seq, n in reader.seen.items()
            if seq not in copy or f'"n":{n}' not in copy[seq].decode()}
    assert lost == {} and reader.failures == [], (lost, reader.failures)
    assert reader.reads > 20 and len(reader.seen) >= 60
    print(f"move and drain: {len(writer.acked)} acked, {writer.unknown} outcome_unknown, "
          f"{writer.deduped} deduped, {reader.reads} reads, {len(reader.seen)} records read")


def test_a_leader_a_move_takes_away_acknowledges_no_write_its_heir_lacks(cluster, observer):
    """`acks: leader` writes while the leader's copy is being moved off: its heir's shard
    (in the ISR) and the new copy's shard are paused, so no follower has them. The leader
    holds their answers until the ISR has them: the heir, still paused, is made leader
    once the new copy has caught up, and answers in doubt make the writers resend with
    their keys. Every write acknowledged is on every final copy exactly once. Without the
    hold the leader answered 4 to 37 of them at once in four runs, none durable on a
    follower (whether the heir then led without them depended on a fetch answer already
    on its way to it)."""
    client = cluster["a"].client()
    client.put_topic("handoff", replication_factor=2, durability="fsync")
    before = wait_isr(cluster["a"], "handoff", 2)
    leader = before["leader"]
    heir = next(n for n in before["replicas"] if n != leader)
    spare = next(n for n in "abc" if n not in before["replicas"])
    cluster[leader].client().append("handoff", [{"data": {"n": 0}}], acks="all")
    paused = [cluster[n].shard_pid(0) for n in (heir, spare)]
    writer = OnceWriter(cluster[leader], "handoff", acks="leader", threads=2)
    try:
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        moving = cluster[leader].http("POST", "/v0/cluster/move",
                                      {"topic": "handoff", "replicas": [heir, spare]})
        assert moving.status == 200, moving.body
        wait_for(lambda: spare in (replication(cluster[leader], "handoff") or {}).get(
            "replicas", ()), 5, "the leader told of the move")       # its role has the target
        writer.start()
        wait_for(lambda: lag(cluster[leader], heir) >= 2, 10,
                 "both writers' records in the leader's log, not in the heir's")
        held = len(writer.acked)
        os.kill(paused.pop(), signal.SIGCONT)         # the new copy catches up and joins;
        wait_for(lambda: observer.read("handoff").state.leader == heir, 10,
                 "the paused heir made leader")       # the heir lacks the writes
        os.kill(paused.pop(), signal.SIGCONT)
        wait_for(lambda: moved(observer, "handoff", {heir, spare}), 30, "the move done")
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + 20, 60, "acked writes after the move")
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        writer.stop()
    copy = converged({n: cluster[n] for n in (heir, spare)}, SHARDS, "handoff", writer.acked)
    del copy[1]
    assert once_violations(copy, writer) == []
    assert held == 0, f"{held} acks: leader writes answered while no follower had them"


def lag(node, follower: str) -> int:
    """How many records of `handoff` its leader (through `node`) holds and `follower` lacks."""
    followers = (replication(node, "handoff") or {}).get("followers") or {}
    return (followers.get(follower) or {}).get("lag") or 0


def topic_copy_gone(node, topic: str) -> bool:
    """Whether `node`'s shard said it dropped its copy of `topic` (a move took it off)."""
    return f"event=copy_moved_off topic={topic} " in node.log()


@pytest.mark.skipif(not HEAVY, reason="TOPICS_TEST_HEAVY=1: a node added and another "
                    "drained and removed, three topics under writes")
def test_a_node_is_added_another_drained_onto_it_and_removed_under_writes(
        cluster, observer, make_node, zk_connect, capsys):
    """Three topics (one, two and three copies) under retrying `acks: all` writers; a
    fourth node joins, the topic of one copy moves onto it, the leader of the three-copy
    topic is drained (each copy to the freest node: the new one for that topic) and then
    stopped: writes go on, with full ISRs, and every acked write is on every final copy
    exactly once; the three-copy topic's writes are `acks: leader`, which a leader that a
    move takes away holds until its followers have them (none is cut at the handoff)."""
    factors = {"one": 1, "two": 2, "three": 3}
    for topic, factor in factors.items():
        cluster["a"].client().put_topic(topic, replication_factor=factor,
                                        durability="fsync" if factor > 1 else "disk")
    drained = observer.read("three").state.leader
    entry, watcher = (n for n in "abc" if n != drained)
    writers = {t: OnceWriter(cluster[entry], t, threads=2,  # "three": its leader drained
                             acks="leader" if t == "three" else "all") for t in factors}
    readers = {t: Reader(cluster[watcher], t) for t in factors}
    for thread in [*writers.values(), *readers.values()]:
        thread.start()
    try:
        wait_for(lambda: all(len(w.acked) >= 50 for w in writers.values()), 60, "acks")
        nodes = {**cluster, "d": make_node(shards=SHARDS,
                                           env=cluster_env(zk_connect, "d", session_ms=4000))}
        wait_for(lambda: "d" in observer.nodes() and observer.nodes()["d"].get("shards"),
                 30, "d registered")
        code, out, err = topics(capsys, cluster[entry], "cluster", "move", "one",
                                "--to", "d", "--timeout", "120")    # a copy of one moves
        assert code == 0 and observer.read("one").state.replicas == ("d",), (out, err)
        held = [t for t in factors if drained in observer.read(t).state.replicas]
        code, out, err = topics(capsys, cluster[entry], "cluster", "drain", drained,
                                "--timeout", "120")
        print(out)
        assert code == 0, (out, err)
        for topic in held:
            state = observer.read(topic).state
            assert drained not in state.replicas, (topic, state)
            assert len(state.replicas) == factors[topic] and state.isr == state.replicas
        assert "d" in observer.read("three").state.replicas    # the only free node
        wait_for(lambda: all(topic_copy_gone(nodes[drained], t) for t in held), 30,
                 "the drained node's copies dropped")   # stopped sooner, it drops them
        nodes[drained].stop()                      # when it returns (the test below)
        wait_for(lambda: drained not in observer.nodes(), 30, "the drained node gone")
        counts = {t: len(w.acked) for t, w in writers.items()}
        wait_for(lambda: all(len(w.acked) >= counts[t] + 50 for t, w in writers.items()),
                 60, "acked writes after the removal")
        for topic in factors:
            assert set(observer.read(topic).state.isr) == set(
                observer.read(topic).state.replicas), topic
    finally:
        for thread in [*writers.values(), *readers.values()]:
            thread.stop()
    assert topic_copy(nodes[drained].data_dir, SHARDS, "three") is None
    finals = {t: {n: nodes[n] for n in observer.read(t).state.replicas} for t in factors}
    for topic, final in finals.items():
        compared = nodes["d"].http("GET", f"/v0/topics/{topic}/checksum").json()
        assert compared["agree"] and set(compared["copies"]) == set(final), compared
    for topic, final in finals.items():          # converged() stops the nodes
        copy = converged(final, SHARDS, topic, writers[topic].acked)
        assert once_violations(copy, writers[topic]) == [], topic
        reader = readers[topic]
        assert reader.failures == [] and all(
            seq in copy for seq in reader.seen), (topic, reader.failures)


@pytest.mark.skipif(not HEAVY, reason="TOPICS_TEST_HEAVY=1: a dead node drained, its copy "
                    "dropped when it returns")
def test_a_dead_node_is_drained_and_drops_its_copy_when_it_returns(
        cluster, observer, make_node, zk_connect, capsys):
    """A node holding a copy is killed; a drain of the dead node puts its copy on the third
    node under writes; when the dead node starts again, it drops the copy it still has
    (it learns the move from the topic's state, not from its own past)."""
    cluster["a"].client().put_topic("kept", replication_factor=2, durability="fsync")
    state = observer.read("kept").state
    dead = next(n for n in state.replicas if n != state.leader)
    spare = next(n for n in "abc" if n not in state.replicas)
    writer = OnceWriter(cluster[spare], "kept", threads=2)
    writer.start()
    try:
        wait_for(lambda: len(writer.acked) >= 50, 60, "acked writes before the kill")
        cluster[dead].kill_group()
        wait_for(lambda: dead not in observer.nodes(), 30, "the dead node's session gone")
        code, out, err = topics(capsys, cluster[spare], "cluster", "drain", dead,
                                "--timeout", "120")
        assert code == 0 and moved(observer, "kept", {state.leader, spare}), (out, err)
        count = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= count + 50, 60, "acked writes after the drain")
        returned = make_node(shards=SHARDS, data_dir=cluster[dead].data_dir,
                             env=cluster_env(zk_connect, dead, session_ms=4000))
        wait_for(lambda: topic_copy_gone(returned, "kept"), 30, "the stale copy dropped")
    finally:
        writer.stop()
    nodes = {**cluster, dead: returned}
    final = {n: nodes[n] for n in (state.leader, spare)}
    compared = nodes[spare].http("GET", "/v0/topics/kept/checksum").json()
    assert compared["agree"] and set(compared["copies"]) == set(final), compared
    returned.stop()
    assert topic_copy(returned.data_dir, SHARDS, "kept") is None
    copy = converged(final, SHARDS, "kept", writer.acked)
    assert once_violations(copy, writer) == []
