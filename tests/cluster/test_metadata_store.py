"""The cluster metadata store's contract, checked on a real ZooKeeper and on the in-memory
ensemble the unit tests use (so the fake cannot drift from the real thing): ephemeral
membership that ends with the session, one controller, a generation that fences the old
controller's writes, versioned compare-and-swap of topic states."""

import os
import subprocess
import sys

import pytest

from tools.testing.node_harness import wait_for
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.cluster.znodes import MemoryEnsemble, MemoryZnodes
from topics_actors.errors import TopicsError

pytestmark = pytest.mark.timeout(60)

STATE = ReplicaState(("a", "b", "c"), ("a", "b", "c"), "a", 1, 1)


@pytest.fixture(params=["memory", "zookeeper"])
def session(request):
    """session(node_id) -> (MetadataStore, close), all on one ensemble."""
    opened = []
    if request.param == "memory":
        ensemble = MemoryEnsemble()

        def open_(node_id):
            znodes = MemoryZnodes(ensemble)
            opened.append(znodes)
            return MetadataStore(znodes, node_id), znodes.close
    else:
        from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes
        connect = request.getfixturevalue("zk_connect")

        def open_(node_id):
            znodes = ZooKeeperZnodes(connect, session_timeout_ms=1000)
            opened.append(znodes)
            return MetadataStore(znodes, node_id), znodes.close
    yield open_
    for znodes in opened:
        if znodes.state() != "lost" or isinstance(znodes, MemoryZnodes):
            znodes.close()


def test_membership_lives_as_long_as_the_session(session):
    a, close_a = session("a")
    b, _ = session("b")
    a.register({"advertise": "10.0.0.1"})
    b.register({"advertise": "10.0.0.2"})
    seen = []
    b.watch_nodes(seen.append)
    assert b.nodes() == {"a": {"advertise": "10.0.0.1"}, "b": {"advertise": "10.0.0.2"}}
    close_a()
    wait_for(lambda: list(b.nodes()) == ["b"], 10, "a's registration to end")
    wait_for(lambda: seen and seen[-1] == ["b"], 10, "the membership watch")


def test_one_node_id_cannot_register_twice(session):
    first, _ = session("a")
    second, _ = session("a")
    first.register({})
    with pytest.raises(TopicsError, match="registered by another live node"):
        second.register({})


def test_one_controller_and_its_successor_fences_it(session):
    a, close_a = session("a")
    b, _ = session("b")
    assert a.campaign() == 1 and b.campaign() == 0
    assert b.controller() == "a"
    assert a.create("t1", STATE) and not b.create("t1", STATE)
    current = a.read("t1")
    moved = ReplicaState(STATE.replicas, ("b", "c"), "b", 2, 1)
    assert a.swap("t1", moved, current.version, as_controller=True)
    assert not b.swap("t1", STATE, current.version, as_controller=True)   # not controller
    close_a()
    wait_for(lambda: b.campaign() == 2, 10, "b to take over as controller")
    latest = b.read("t1")
    assert latest.state == moved and b.controller() == "b"


def test_a_deposed_controller_cannot_write(session):
    a, _ = session("a")
    b, _ = session("b")
    assert a.campaign() == 1
    a.create("t2", STATE)
    # The role moves without a's session ending (a paused process, a partition): whoever
    # wins next bumps the generation, and a's fenced write fails.
    _depose(a, b)
    version = b.read("t2").version
    assert not a.swap("t2", STATE, version, as_controller=True)
    assert b.swap("t2", STATE, version, as_controller=True)


def _depose(old: MetadataStore, new: MetadataStore) -> None:
    """Remove old's controller entry by hand, as its session expiry would."""
    entry = old.znodes.get("/topics/controller")
    assert entry is not None
    if isinstance(old.znodes, MemoryZnodes):
        del old.znodes.ensemble.nodes["/topics/controller"]
    else:
        old.znodes.client.delete("/topics/controller")
    assert new.campaign() == 2


def test_state_swaps_are_compare_and_swap(session):
    a, _ = session("a")
    assert a.read("t3") is None
    assert a.create("t3", STATE)
    first = a.read("t3")
    shrunk = ReplicaState(STATE.replicas, ("a", "b"), "a", 1, 1)
    assert a.swap("t3", shrunk, first.version)
    assert not a.swap("t3", STATE, first.version)              # a stale version
    assert a.read("t3") == (shrunk, first.version + 1)
    assert a.topics() == ["t3"]


def test_a_killed_process_leaves_the_cluster_when_its_session_expires(zk_connect):
    """kill -9 of a registered process: ZooKeeper ends its session and its entry goes."""
    from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes
    script = ("import sys, time\n"
              "from topics_actors.cluster.metadata_store import MetadataStore\n"
              "from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes\n"
              "MetadataStore(ZooKeeperZnodes(sys.argv[1], 1000), 'doomed').register({})\n"
              "print('registered', flush=True)\n"
              "time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script, zk_connect],
                             stdout=subprocess.PIPE, start_new_session=True)
    watcher = MetadataStore(ZooKeeperZnodes(zk_connect, 1000), "watcher")
    try:
        assert child.stdout.readline().strip() == b"registered"
        assert "doomed" in watcher.nodes()
        os.killpg(child.pid, 9)
        child.wait(10)
        wait_for(lambda: "doomed" not in watcher.nodes(), 15, "the session to expire")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, 9)
            child.wait(10)
        child.stdout.close()
        watcher.znodes.close()


def test_sessions_survive_a_quick_zookeeper_restart(zookeeper, zk_connect):
    from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes
    # The fixture's ceiling (maxSessionTimeout=20000): a JVM restart on a loaded 2-core CI
    # machine has taken over 8 s, and "quick" must mean well inside the session.
    store = MetadataStore(ZooKeeperZnodes(zk_connect, 20_000), "a")
    try:
        store.register({})
        zookeeper.kill()
        wait_for(lambda: store.znodes.state() == "suspended", 25, "SUSPENDED")
        zookeeper.start()
        wait_for(lambda: store.znodes.state() == "connected", 30, "the session to resume")
        assert "a" in store.nodes()
    finally:
        store.znodes.close()
