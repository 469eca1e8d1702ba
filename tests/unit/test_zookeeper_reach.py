"""Why a node could not reach ZooKeeper, named per server (cluster/zookeeper_znodes.py
`unreachable`): a host that does not resolve, a refused connection, and one that accepts
but is no ZooKeeper each read differently, not all as kazoo's "Connection time-out"."""

import socket
import time

import pytest

from topics_actors.cluster.zookeeper_znodes import attempt_hosts, unreachable

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


def test_servers_are_listed_so_an_attempt_takes_a_quarter_of_the_session():
    assert attempt_hosts("zk:2181/t-1") == "zk:2181,zk:2181,zk:2181,zk:2181/t-1"
    assert attempt_hosts("a:1,b:2,c:3") == "a:1,b:2,c:3,a:1,b:2,c:3"
    assert attempt_hosts("a:1,b:2,c:3,d:4,e:5") == "a:1,b:2,c:3,d:4,e:5"


def test_a_server_that_accepts_and_never_answers_holds_an_attempt_a_quarter_session():
    """A ZooKeeper still starting accepts and answers nothing: kazoo gives up on the
    attempt after a quarter of the 4 s session and tries again, so within 3 s it
    connects at least twice (one attempt used to wait the whole session)."""
    from kazoo.client import KazooClient
    accepted = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        client = KazooClient(hosts=attempt_hosts(f"127.0.0.1:{port}"), timeout=4.0,
                             connection_retry={"max_tries": -1, "max_delay": 0.2})
        client.start_async()
        deadline = time.monotonic() + 3.0
        try:
            while time.monotonic() < deadline and len(accepted) < 2:
                try:
                    accepted.append(listener.accept()[0])
                except socket.timeout:
                    continue
        finally:
            client.stop()
            client.close()
            for sock in accepted:
                sock.close()
    assert len(accepted) >= 2
