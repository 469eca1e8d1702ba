"""Why a node could not reach ZooKeeper, named per server (cluster/zookeeper_znodes.py
`unreachable`): a host that does not resolve, a refused connection, and one that accepts
but is no ZooKeeper each read differently, not all as kazoo's "Connection time-out"."""

import socket

import pytest

from topics_actors.cluster.zookeeper_znodes import unreachable

pytestmark = pytest.mark.timeout(20)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_each_cause_is_named():
    assert "does not resolve" in unreachable("zk.invalid:2181/chroot")
    port = _free_port()
    assert f"127.0.0.1:{port} refused the connection" in unreachable(f"127.0.0.1:{port}")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        both = unreachable(f"zk.invalid,127.0.0.1:{port}")
    assert "zk.invalid does not resolve" in both and "accepted a connection" in both
