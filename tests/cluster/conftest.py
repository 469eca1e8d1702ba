import uuid

import pytest

from tools.testing.zookeeper_server import ZooKeeperServer
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper (the Debian package's jars) per test module, stopped after it."""
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper"))).start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper):
    """A connect string with a fresh chroot, so tests sharing the server do not meet."""
    from kazoo.client import KazooClient
    chroot = f"/t-{uuid.uuid4().hex[:12]}"
    client = KazooClient(hosts=zookeeper.connect)
    client.start(timeout=30)       # a JVM just started on a loaded machine answers late
    client.ensure_path(chroot)
    client.stop()
    client.close()
    return zookeeper.connect + chroot


@pytest.fixture
def observer(zk_connect):
    """A ZooKeeper session of the test's own, reading the cluster's metadata."""
    store = MetadataStore(ZooKeeperZnodes(zk_connect, 2000), "observer")
    yield store
    store.znodes.close()
