"""Replicated topics on three nodes and a real ZooKeeper (docs/CLUSTER.md): placement,
writes through any node, the high watermark, acks modes and min_isr, and failover under
`acks: all` writes with an oracle of acknowledged records (spec/replication.md D8: 0 acked
writes lost, no divergence between the copies once they converge)."""

import os
import re
import signal
import time

import pytest

from tools.testing.cluster_harness import (
    OnceWriter, Writer, cluster_env, converged, once_violations, replication,
    wait_caught_up, wait_isr,
)
from tools.testing.node_harness import wait_for
from tools.testing.sse_reader import SseReader
from topics_actors.errors import TopicsError
from topics_actors.shard.replication.replica_rules import PLACE_WAIT_MS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SHARDS = 2


@pytest.fixture
def cluster(make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid)) for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3 and all(
        info.get("shards") for info in observer.nodes().values()), 30, "three registrations")
    return nodes


def test_a_replicated_topic_is_written_and_read_through_any_node(cluster, observer):
    client = cluster["a"].client()
    created = client.put_topic("orders", replication_factor=3, durability="fsync")
    assert created["config"]["replication_factor"] == 3 and created["config"]["min_isr"] == 2
    state = observer.read("orders").state
    assert sorted(state.replicas) == ["a", "b", "c"] and state.leader_epoch == 1
    view = wait_isr(cluster["c"], "orders", 3)
    assert view["leader"] == state.leader and view["hw"] == 0
    for nid, node in cluster.items():                       # HTTP through every node
        reply = node.http("POST", "/v0/topics/orders", {"records": [{"data": {"via": nid}}]})
        assert reply.status in (200, 201), reply.body
    for i in range(20):                                     # ZeroMQ through a non-leader
        follower = next(n for n in "abc" if n != state.leader)
        cluster[follower].client().append("orders", [{"data": {"i": i}}], acks="all")
    for nid, node in cluster.items():
        view = replication(node, "orders")
        assert view["hw"] == 23 and sorted(view["isr"]) == ["a", "b", "c"], (nid, view)
    diff = cluster["b"].http("POST", "/v0/topics/orders/diff", {"from_seq": 0, "limit": 100})
    assert [r["$seq"] for r in diff.json()["records"]] == list(range(1, 24))
    compared = cluster["b"].http("GET", "/v0/topics/orders/checksum").json()   # the copies
    assert compared["agree"] and sorted(compared["copies"]) == ["a", "b", "c"], compared
    assert (compared["from_seq"], compared["to_seq"]) == (1, 23)
    assert {copy["records"] for copy in compared["copies"].values()} == {23}
    bad = cluster["a"].http("POST", "/v0/topics/orders", {"records": [{"data": 1}],
                                                          "acks": "some"})
    assert bad.status == 400 and bad.json()["error"]["code"] == "invalid_request"
    claim = cluster["a"].http("POST", "/v0/topics/orders/claim", {"node": "w"})
    assert claim.status == 409 and claim.json()["error"]["code"] == "not_a_queue"
    started = time.monotonic()              # a name no node has, not to be created: 404
    missing = cluster["b"].http("POST", "/v0/topics/nowhere", {"records": [{"data": 1}],
                                                                "create": False})
    assert missing.status == 404 and missing.json()["error"]["code"] == "topic_not_found"
    assert time.monotonic() - started < PLACE_WAIT_MS / 1000    # the lookup's answer, not
    assert observer.read("nowhere") is None                     # its wait running out
    router = cluster["a"].http("PUT", "/v0/routers/r1", {"source": "x", "dest": "orders"})
    assert router.status == 400 and "replicated" in router.json()["error"]["message"]
    assert cluster["a"].http("GET", "/v0/topics/x").status == 404   # refused: nothing made
    assert cluster["a"].http("GET", "/v0/cluster").json()["topics"]["orders"]["leader"] == (
        state.leader)
    led = cluster[state.leader].http("GET", "/v0/cluster").json()["topics"]["orders"]
    assert set(led["followers"]) == set("abc") - {state.leader}
    metrics = cluster[state.leader].http("GET", "/v0/metrics").body.decode()
    assert 'topics_topic_isr_size{topic="orders"} 3' in metrics
    assert "topics_under_replicated_topics 0" in metrics
    assert re.search(r"^topics_leader_topics [1-9]", metrics, re.M)
    assert metrics.count('topics_follower_lag_records{topic="orders"') == 2
    _change_config_through_a_follower(cluster, state.leader, follower)
    _created_is_seen_through_every_node(cluster)
    with pytest.raises(TopicsError) as refused:     # a config error at once, not retried
        cluster["b"].client().put_topic("toomany", replication_factor=5)
    assert refused.value.code.wire == "not_enough_replicas" and "5 live" in str(refused.value)
    assert observer.read("toomany") is None
    assert sorted(converged(cluster, SHARDS, "orders")) == list(range(15, 25))   # stops them


def _created_is_seen_through_every_node(cluster) -> None:
    """Read-your-writes metadata (issue 33): once a create is answered, every node finds
    the topic at once, though its own states are re-read only every 300 ms (each asks
    ZooKeeper afresh for a name it does not know, instead of answering 404)."""
    for i, factor in enumerate((1, 3, 1, 3)):
        name = f"fresh{i}"
        created = cluster["a"].http("PUT", f"/v0/topics/{name}", {"replication_factor": factor})
        assert created.status == 201, created.body
        for nid in "cb":
            got = cluster[nid].http("GET", f"/v0/topics/{name}")
            assert got.status == 200, (nid, name, got.body)
        diff = cluster["c"].http("POST", f"/v0/topics/{name}/diff", {"from_seq": 0})
        assert diff.status == 200 and diff.json()["records"] == [], diff.body
    missing = cluster["c"].http("GET", "/v0/topics/nowhere")
    assert missing.status == 404 and missing.json()["error"]["code"] == "topic_not_found"
    cluster["a"].http("POST", "/v0/topics/fresh0", {"records": [{"data": 1}]})
    listed, cursor = {}, ""                 # GET /v0/topics lists the whole cluster, paged
    for _ in range(10):
        page = cluster["c"].http("GET", f"/v0/topics?page_size=2{cursor}").json()
        listed.update({t["topic"]: t["head_seq"] for t in page["topics"]})
        if "next_cursor" not in page:
            break
        cursor = f"&cursor={page['next_cursor']}"
    assert listed == {"fresh0": 1, "fresh1": 0, "fresh2": 0, "fresh3": 0, "orders": 24}


def _change_config_through_a_follower(cluster, leader: str, follower: str) -> None:
    """A config change through a node that does not lead the topic: the leader writes it
    into the topic's cluster state and every copy takes it (docs/CLUSTER.md 10)."""
    config = {"replication_factor": 3, "durability": "fsync", "cap_records": 10}
    changed = cluster[follower].http("PUT", "/v0/topics/orders", config)
    assert changed.status == 200 and changed.json()["config"]["cap_records"] == 10, (
        changed.body)
    for nid, node in cluster.items():
        wait_for(lambda node=node: node.http("GET", "/v0/topics/orders").json()["config"][
            "cap_records"] == 10, 20, f"the new config on node {nid}")
    refused = cluster[follower].http("PUT", "/v0/topics/orders", {"cap_records": 10})
    assert refused.status == 400 and "replication_factor" in refused.json()["error"][
        "message"]
    cluster[follower].client().append("orders", [{"data": {"last": 1}}], acks="all")
    state = cluster[leader].http("GET", "/v0/topics/orders").json()
    assert (state["earliest_seq"], state["head_seq"], state["count"]) == (15, 24, 10)


def test_a_watch_through_a_follower_node_wakes_when_its_copy_moves(cluster, observer):
    """A node holding a copy learns of new records by replicating them, so its watch
    streams wake at replication speed, not at their heartbeat."""
    cluster["a"].client().put_topic("feed", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "feed", 3)
    leader = observer.read("feed").state.leader
    follower = cluster[next(n for n in "abc" if n != leader)]
    session = follower.http("POST", "/v0/watch", {"topics": {"feed": {}},
                                                    "heartbeat_ms": 60_000}).json()
    with SseReader(follower.http_port, session["stream_url"]) as reader:
        assert reader.next().retry == 2000
        assert reader.next().event == "caught-up"
        cluster[leader].client().append("feed", [{"data": "news"}], acks="all")
        event = reader.next(timeout_s=10)
        assert event.event == "record", event
        assert [r["data"] for r in event.json()["records"]] == ["news"]


def test_min_isr_refuses_acks_all_and_the_watermark_hides_leader_acked_writes(
        make_node, zk_connect, observer):
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid)) for nid in "ab"}
    wait_for(lambda: len(observer.nodes()) == 2, 30, "two registrations")
    client = nodes["a"].client()
    client.put_topic("pair", replication_factor=2, min_isr=2, durability="fsync")
    wait_isr(nodes["a"], "pair", 2)
    client.append("pair", [{"data": 1}], acks="all")
    leader = observer.read("pair").state.leader
    follower = "b" if leader == "a" else "a"
    os.killpg(nodes[follower].proc.pid, signal.SIGSTOP)    # past the session timeout
    try:
        wait_isr(nodes[leader], "pair", 1)
        with pytest.raises(TopicsError) as refused:     # at once, not retried to the deadline
            nodes[leader].client().append("pair", [{"data": 2}], acks="all")
        assert refused.value.code.wire == "not_enough_replicas"
        nodes[leader].client().append("pair", [{"data": 3}], acks="leader")
        view = replication(nodes[leader], "pair")
        assert view["hw"] == 1                              # written, not visible
        page = nodes[leader].http("POST", "/v0/topics/pair/diff", {"from_seq": 0})
        assert [r["$seq"] for r in page.json()["records"]] == [1]
    finally:
        os.killpg(nodes[follower].proc.pid, signal.SIGCONT)
    # The stopped node's session ended: it registers again once it runs, and catches up.
    wait_for(lambda: follower in observer.nodes(), 30, "the follower back")
    view = wait_isr(nodes[leader], "pair", 2, timeout_s=60)
    assert view["hw"] == 2
    page = nodes[leader].http("POST", "/v0/topics/pair/diff", {"from_seq": 0})
    assert [r["data"] for r in page.json()["records"]] == [1, 3]


def test_killing_the_leader_loses_no_acked_write_and_stores_no_retry_twice(
        cluster, observer, make_node, zk_connect):
    """Exactly once across failover: retrying writers (each number until acked, again with
    its key after outcome_unknown) through a non-leader node, the leader killed; every seq
    of the converged copies is checked: each number once, every acked one at its seq. A
    write sent again with its key through the new leader is answered with its original
    seqs (the keys travel with the records)."""
    client = cluster["a"].client()
    client.put_topic("ledger", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "ledger", 3)
    leader = observer.read("ledger").state.leader
    entry = next(n for n in "abc" if n != leader)
    early = cluster[entry].client().append("ledger", [{"data": {"n": 0}}], acks="all",
                                           idempotency_key="early")
    writer = OnceWriter(cluster[entry], "ledger")
    writer.start()
    wait_for(lambda: len(writer.acked) >= 50, 60, "acked writes before the kill")
    cluster[leader].kill_group()                          # kill -9 of the leader's node
    state = wait_for(lambda: (s := observer.read("ledger").state).leader not in (None, leader)
                     and s, 30, "a new leader")
    assert state.leader_epoch == 2 and leader not in state.isr
    again = cluster[entry].client().append("ledger", [{"data": {"n": 0}}], acks="all",
                                           idempotency_key="early")
    assert again["deduped"] and again["first_seq"] == early["first_seq"]
    before = len(writer.acked)
    wait_for(lambda: len(writer.acked) >= before + 50, 60, "acked writes after the failover")
    wait_for(lambda: leader not in observer.nodes(), 30, "the old session gone")
    returned = make_node(shards=SHARDS, data_dir=cluster[leader].data_dir,
                         env=cluster_env(zk_connect, leader))
    nodes = {**cluster, leader: returned}
    wait_isr(nodes[state.leader], "ledger", 3, timeout_s=60)
    writer.stop()
    head = wait_caught_up(nodes[state.leader], "ledger")["hw"]
    copy = converged(nodes, SHARDS, "ledger", writer.acked)      # 0 acked writes lost
    del copy[early["first_seq"]]
    assert max(copy) >= head
    assert once_violations(copy, writer) == []
    assert len(writer.acked) >= 100
    print(f"exactly once: {len(writer.acked)} acked, {writer.unknown} outcome_unknown, "
          f"{writer.deduped} answered with original seqs")


def test_zookeeper_killed_and_restarted_within_the_session_changes_no_leader(
        make_node, zk_connect, zookeeper, observer):
    """D8 24: sessions resume, no leadership moves; `all` acks pause, then go on."""
    nodes = {nid: make_node(shards=SHARDS, env=cluster_env(zk_connect, nid, session_ms=20000))
             for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3, 30, "three registrations")
    nodes["a"].client().put_topic("calm", replication_factor=3, durability="fsync")
    wait_isr(nodes["a"], "calm", 3)
    before = observer.read("calm").state
    writer = Writer(nodes["b"], "calm")
    writer.start()
    wait_for(lambda: len(writer.acked) >= 20, 60, "acked writes")
    zookeeper.kill()
    zookeeper.start()
    acked = len(writer.acked)
    wait_for(lambda: len(writer.acked) >= acked + 20, 60, "acked writes after the restart")
    writer.stop()
    after = wait_for(lambda: _quietly(observer.read, "calm"), 30, "the state readable").state
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    assert sorted(wait_isr(nodes["a"], "calm", 3)["isr"]) == ["a", "b", "c"]
    wait_caught_up(nodes["a"], "calm")
    converged(nodes, SHARDS, "calm", writer.acked)


def test_every_node_killed_at_once_keeps_every_acked_write(cluster, observer, make_node,
                                                           zk_connect):
    """D8 13 (process level): kill -9 of all three nodes under `all` writes to an fsync
    topic, then all come back: every acked write is there, on every copy."""
    cluster["a"].client().put_topic("crash", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "crash", 3)
    writer = Writer(cluster["c"], "crash", retry_deadline_ms=2000)
    writer.start()
    wait_for(lambda: len(writer.acked) >= 40, 60, "acked writes")
    for node in cluster.values():
        node.kill_group()
    writer.stop()
    wait_for(lambda: not observer.nodes(), 30, "every session gone")
    nodes = {nid: make_node(shards=SHARDS, data_dir=cluster[nid].data_dir,
                            env=cluster_env(zk_connect, nid)) for nid in "abc"}
    state = wait_for(lambda: (s := observer.read("crash").state).leader and s, 30, "a leader")
    wait_isr(nodes[state.leader], "crash", 3, timeout_s=60)
    after = nodes["b"].client().append("crash", [{"data": "after"}], acks="all")
    assert after["first_seq"] > max(writer.acked)
    wait_caught_up(nodes[state.leader], "crash")
    converged(nodes, SHARDS, "crash", writer.acked)


def test_a_killed_leader_shard_is_restarted_and_leads_again(cluster, observer):
    """D8 26: kill -9 of the leader's shard process only: its supervisor restarts it, the
    node keeps its session, so leadership stays; acked writes survive."""
    cluster["a"].client().put_topic("shardy", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "shardy", 3)
    state = observer.read("shardy").state
    leader = cluster[state.leader]
    writer = Writer(cluster[next(n for n in "abc" if n != state.leader)], "shardy")
    writer.start()
    wait_for(lambda: len(writer.acked) >= 20, 60, "acked writes")
    from topics_actors.topic_identity import shard_of_name
    os.kill(leader.shard_pid(shard_of_name("shardy", SHARDS)), signal.SIGKILL)
    acked = len(writer.acked)
    wait_for(lambda: len(writer.acked) >= acked + 20, 60, "acked writes after the restart")
    writer.stop()
    after = observer.read("shardy").state
    assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch)
    wait_caught_up(leader, "shardy")
    converged(cluster, SHARDS, "shardy", writer.acked)


def _quietly(read, *args):
    """`read(*args)`, None while the observer's own session reconnects."""
    try:
        return read(*args)
    except Exception:                      # kazoo's connection errors
        return None


def test_deletes_are_replicated_and_stay_deleted_across_a_failover(
        cluster, observer, make_node, zk_connect):
    """D8 31: a permanent delete (before_seq and by tag), then the leader is killed: the
    deleted seqs stay gone on the new leader, on the returning node, on every copy."""
    client = cluster["a"].client()
    client.put_topic("audit", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "audit", 3)
    for i in range(40):
        client.append("audit", [{"data": i, "tag": "pii" if i % 4 == 0 else "ok"}])
    gone = client.delete_records("audit", before_seq=11)
    assert gone["deleted"] == 10 and gone["earliest_seq"] == 11
    tagged = cluster["b"].http("POST", "/v0/topics/audit/delete", {"match": "pii"})
    assert tagged.status == 200 and tagged.json()["deleted"] == 7, tagged.body
    kept = [s for s in range(11, 41) if (s - 1) % 4 != 0]
    state = observer.read("audit").state
    cluster[state.leader].kill_group()
    new = wait_for(lambda: (s := observer.read("audit").state).leader not in (None,
                                                                             state.leader)
                   and s, 30, "a new leader")
    assert wait_for(lambda: _seqs(cluster[new.leader], "audit"), 30, "a read") == kept
    wait_for(lambda: state.leader not in observer.nodes(), 30, "the old session gone")
    back = make_node(shards=SHARDS, data_dir=cluster[state.leader].data_dir,
                     env=cluster_env(zk_connect, state.leader))
    nodes = {**cluster, state.leader: back}
    more = nodes[new.leader].client().delete_records("audit", before_seq=20)
    assert more["deleted"] == len([s for s in kept if s < 20])
    wait_isr(nodes[new.leader], "audit", 3, timeout_s=60)
    wait_caught_up(nodes[new.leader], "audit")
    wait_for(lambda: all(_ops_applied_everywhere(nodes, "audit")), 30, "deletes applied")
    assert sorted(converged(nodes, SHARDS, "audit")) == [s for s in kept if s >= 20]


def _seqs(node, topic: str) -> list[int] | None:
    """The seqs a diff from 0 shows through `node`, None while it cannot answer (the new
    leader has not learned its role yet)."""
    page = node.http("POST", f"/v0/topics/{topic}/diff", {"from_seq": 0, "limit": 1000})
    return [r["$seq"] for r in page.json()["records"]] if page.status == 200 else None


def _ops_applied_everywhere(nodes: dict, topic: str):
    """Every node's shard reports the topic's ops applied (status of its shards)."""
    for node in nodes.values():
        statuses = node.client().shard_statuses()
        yield all(not s.get("replication", {}).get("ops_pending") for s in statuses)


def test_a_replicated_queue_never_redelivers_an_acked_job_across_a_failover(
        cluster, observer, make_node, zk_connect):
    """D8 32: claims and acks through a failover. Acks are replicated (their jobs' records
    deleted on every in-sync replica before the ack is answered); leases are the leader's,
    so a job held at the failover may be delivered again, but an acked one never is."""
    client = cluster["a"].client()
    client.put_topic("jobs", type="queue", replication_factor=3, durability="fsync",
                     lease_ms=2000)
    wait_isr(cluster["a"], "jobs", 3)
    for i in range(0, 120, 20):
        client.append("jobs", [{"data": n} for n in range(i, i + 20)], acks="all")
    state = observer.read("jobs").state
    worker = cluster[next(n for n in "abc" if n != state.leader)].client(
        request_timeout_ms=2000, retry_deadline_ms=20_000)
    acked: set[int] = set()

    def work(rounds: int) -> None:
        for _ in range(rounds):
            try:
                jobs = worker.claim("jobs", "w1", max=10)["claimed"]
                again = {j["$seq"] for j in jobs} & acked
                assert not again, f"acked jobs delivered again: {sorted(again)}"
                if jobs:
                    reply = worker.ack("jobs", "w1", [j["$seq"] for j in jobs],
                                       [j["lease_id"] for j in jobs])
                    acked.update(reply["acked_seqs"])
            except TopicsError:
                continue                   # in doubt: those jobs may come back
            if len(acked) == 120:
                return

    work(5)
    assert len(acked) >= 40
    cluster[state.leader].kill_group()
    wait_for(lambda: observer.read("jobs").state.leader not in (None, state.leader), 30,
             "a new leader")
    deadline_rounds = 200
    work(deadline_rounds)
    assert len(acked) == 120
    new = observer.read("jobs").state
    queue = wait_for(lambda: (t := cluster[new.leader].http("GET", "/v0/topics/jobs"))
                     .status == 200 and t.json(), 10, "the queue's state")
    assert queue["count"] == 0 and queue["queue"]["ready"] == 0


def test_durable_leases_of_a_replicated_queue_survive_a_failover(cluster, observer):
    """D8 32 with `leases_durable`: claims, nacks and extends are ops of the topic, answered
    once every in-sync replica holds them, so after the leader's node is killed the new
    leader knows who holds each job (nobody else gets it; its holder acks it with the lease
    id the old leader gave) and how often each job was delivered."""
    client = cluster["a"].client()
    client.put_topic("tasks", type="queue", replication_factor=3, durability="fsync",
                     lease_ms=60_000, leases_durable=True)
    wait_isr(cluster["a"], "tasks", 3)
    client.append("tasks", [{"data": n} for n in range(30)], acks="all")
    state = observer.read("tasks").state
    worker = cluster[next(n for n in "abc" if n != state.leader)].client(
        request_timeout_ms=2000, retry_deadline_ms=30_000)
    held = worker.claim("tasks", "w1", max=10)["claimed"]
    given_back = worker.claim("tasks", "w2", max=5)["claimed"]
    assert [j["$seq"] for j in held + given_back] == list(range(1, 16))
    nacked = worker.nack("tasks", "w2", [j["$seq"] for j in given_back],
                         lease_ids=[j["lease_id"] for j in given_back])
    assert nacked["nacked_seqs"] == list(range(11, 16)) and nacked["nacked"] == 5
    extended = worker.extend("tasks", "w1", [1, 2], 120_000,
                             lease_ids=[j["lease_id"] for j in held[:2]])
    assert extended["extended_seqs"] == [1, 2] and extended["extended"] == 2
    cluster[state.leader].kill_group()
    wait_for(lambda: observer.read("tasks").state.leader not in (None, state.leader), 30,
             "a new leader")
    jobs = worker.claim("tasks", "w3", max=30)["claimed"]
    assert [j["$seq"] for j in jobs] == list(range(11, 31))       # w1's ten are still held
    assert {j["$seq"]: j["deliveries"] for j in jobs} == {
        seq: 2 if seq <= 15 else 1 for seq in range(11, 31)}
    acked = worker.ack("tasks", "w1", [j["$seq"] for j in held],
                       lease_ids=[j["lease_id"] for j in held])
    assert acked["acked_seqs"] == list(range(1, 11)) and acked["skipped"] == []
    assert acked["acked"] == 10
    stale = worker.ack("tasks", "w9", [11], lease_ids=[jobs[0]["lease_id"]])
    assert stale["acked"] == 0 and stale["skipped"] == [11]


def test_a_stalled_follower_shard_leaves_the_isr_on_lag_and_rejoins(make_node, zk_connect,
                                                                     observer):
    """D8 6 and 28: a follower whose shard stops fetching (its node's session lives on, so
    the controller sees nothing) is dropped from the ISR by the leader after the lag time;
    `all` writes stall only until then; once it runs again it catches up and rejoins. (The
    supervisors wait a minute for a silent shard here, so the stalled one is not restarted.)"""
    cluster = {nid: make_node(shards=SHARDS, env=cluster_env(
        zk_connect, nid, TOPICS_HEARTBEAT_TIMEOUT_MS="60000")) for nid in "abc"}
    wait_for(lambda: len(observer.nodes()) == 3 and all(
        info.get("shards") for info in observer.nodes().values()), 30, "three registrations")
    cluster["a"].client().put_topic("laggy", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "laggy", 3)
    state = observer.read("laggy").state
    slow = next(n for n in state.replicas if n != state.leader)
    from topics_actors.topic_identity import shard_of_name
    pid = cluster[slow].shard_pid(shard_of_name("laggy", SHARDS))
    writer = Writer(cluster[state.leader], "laggy")
    writer.start()
    os.kill(pid, signal.SIGSTOP)
    try:
        shrunk = wait_for(lambda: slow not in observer.read("laggy").state.isr
                          and observer.read("laggy").state, 40, "the ISR shrink")
        assert shrunk.leader == state.leader and shrunk.leader_epoch == state.leader_epoch
        acked = len(writer.acked)
        wait_for(lambda: len(writer.acked) >= acked + 20, 30, "acked writes without it")
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: slow in observer.read("laggy").state.isr, 60, "the ISR expand")
    writer.stop()
    wait_caught_up(cluster[state.leader], "laggy")
    converged(cluster, SHARDS, "laggy", writer.acked)


def test_a_deleted_topic_leaves_every_copy_and_its_name_can_be_used_again(
        cluster, observer, make_node, zk_connect):
    """Deleting a replicated topic through a node that does not lead it: every copy drops
    it, a node away at the time drops its copy when it returns (the tombstone in the
    topic's state), and a new topic of the name starts empty (docs/CLUSTER.md 10)."""
    client = cluster["a"].client()
    client.put_topic("scratch", replication_factor=3, durability="fsync")
    wait_isr(cluster["a"], "scratch", 3)
    for i in range(10):
        client.append("scratch", [{"data": i}], acks="all")
    first = observer.read("scratch").state
    away, entry = [n for n in "abc" if n != first.leader]
    cluster[away].stop()
    wait_for(lambda: away not in observer.nodes(), 30, "the stopped node's session gone")
    gone = cluster[entry].http("DELETE", "/v0/topics/scratch")
    assert gone.status == 200 and gone.json()["deleted"] is True, gone.body
    assert observer.read("scratch").state.deleted
    for nid in (first.leader, entry):
        assert cluster[nid].http("GET", "/v0/topics/scratch").status == 404
    back = make_node(shards=SHARDS, data_dir=cluster[away].data_dir,
                     env=cluster_env(zk_connect, away))
    nodes = {**cluster, away: back}
    wait_for(lambda: back.http("GET", "/v0/topics/scratch").status == 404, 30,
             "the returned node's copy dropped")
    nodes[entry].client().put_topic("scratch", replication_factor=3, durability="fsync")
    again = observer.read("scratch").state
    assert not again.deleted and again.first_epoch > first.leader_epoch
    wait_isr(nodes[entry], "scratch", 3, timeout_s=60)
    reply = nodes[away].client().append("scratch", [{"data": "new"}], acks="all")
    assert reply["first_seq"] == 1
    assert sorted(converged(nodes, SHARDS, "scratch")) == [1]
