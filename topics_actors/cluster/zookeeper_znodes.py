"""Znodes over a real ZooKeeper session (kazoo): the thin shell of cluster/znodes.py.

kazoo runs its own threads and sockets, so a client is made in the process that uses it,
never inherited across a fork. Its SUSPENDED state (connection down, session perhaps
alive) is reported as "suspended": a leader must stop acking `all` writes then, not only
once the session is LOST.
"""

from __future__ import annotations

import logging

import socket

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from topics_actors.cluster.znodes import ChildWatch
from topics_actors.errors import TopicsError, ErrorCode

log = logging.getLogger(__name__)

_STATES = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
           KazooState.LOST: "lost"}
CONNECT_SHARES = 4    # a connect attempt waits at most 1/4 of the session timeout


def attempt_hosts(connect: str) -> str:
    """`connect` with its servers listed at least CONNECT_SHARES times over. kazoo waits
    up to session_timeout / len(servers) for a server to answer a connect. A ZooKeeper that
    is still starting accepts connections and may answer none, so one attempt outlasted the
    session, and the server ended the session meanwhile: a ZooKeeper restart cost a node
    its session and its leaderships. With the servers repeated, the attempt gives up after
    a quarter of the session and the next one finds the server up."""
    hosts, chroot = _servers(connect)
    repeat = -(-CONNECT_SHARES // max(1, len(hosts)))
    return ",".join(hosts * repeat) + ("/" + chroot if chroot else "")


def _servers(connect: str) -> tuple[list[str], str]:
    """A connect string's servers ("host:port" each) and its chroot ("" if none)."""
    servers, _, chroot = connect.partition("/")
    return [host.strip() for host in servers.split(",") if host.strip()], chroot


class ZooKeeperZnodes:
    def __init__(self, connect: str, session_timeout_ms: int, connect_timeout_ms: int = 10_000):
        self.client = KazooClient(hosts=attempt_hosts(connect),
                                  timeout=session_timeout_ms / 1000,
                                  connection_retry={"max_tries": -1, "max_delay": 1})
        self._state = "lost"
        self._callbacks: list = []
        self.client.add_listener(self._on_state)
        try:
            self.client.start(timeout=connect_timeout_ms / 1000)
        except Exception as exc:      # kazoo raises its own timeout type
            self.client.close()
            raise TopicsError(f"no ZooKeeper at {connect}: {unreachable(connect)}",
                              ErrorCode.NOT_READY) from exc
        self._state = "connected"

    def _on_state(self, state: KazooState) -> None:
        self._state = _STATES.get(state, "lost")
        log.info("event=zookeeper_session state=%s", self._state)
        for callback in self._callbacks:
            callback()

    def on_state(self, callback) -> None:
        self._callbacks.append(callback)

    def session_id(self) -> int | None:
        """This session's id (ZooKeeper's ephemeralOwner of what it creates)."""
        client_id = self.client.client_id
        return client_id[0] if client_id else None

    def owner(self, path: str) -> int | None:
        """The session owning the ephemeral node at `path` (None: none, or no such node)."""
        try:
            _data, stat = self.client.get(path)
        except NoNodeError:
            return None
        return stat.ephemeralOwner or None

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> bool:
        try:
            self.client.create(path, data, ephemeral=ephemeral, makepath=True)
            return True
        except NodeExistsError:
            return False

    def get(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self.client.get(path)
            return data, stat.version
        except NoNodeError:
            return None

    def set(self, path: str, data: bytes, version: int) -> bool:
        try:
            self.client.set(path, data, version=version)
            return True
        except (BadVersionError, NoNodeError):
            return False

    def set_fenced(self, fence: str, fence_version: int, path: str, data: bytes,
                   version: int) -> bool:
        transaction = self.client.transaction()
        transaction.check(fence, fence_version)
        transaction.set_data(path, data, version)
        return not any(isinstance(result, Exception) for result in transaction.commit())

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self.client.get_children(path))
        except NoNodeError:
            return []

    def sync(self, path: str) -> None:
        self.client.sync(path)

    def watch_children(self, path: str, callback: ChildWatch) -> None:
        self.client.ensure_path(path)
        ChildrenWatch(self.client, path, lambda names: callback(sorted(names)))

    def state(self) -> str:
        return self._state

    def close(self) -> None:
        try:
            self.client.stop()
        finally:
            self.client.close()


def unreachable(connect: str, timeout_s: float = 2.0) -> str:
    """Why no server of a connect string answered, server by server: a host that does not
    resolve, a connection refused (nothing listens there), or no answer (a firewall, a
    host that is down): an operator fixes each differently."""
    reasons = []
    for server in _servers(connect)[0]:
        host, _, port = server.rpartition(":")
        host, port = (host or server), int(port) if port.isdigit() else 2181
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            reasons.append(f"{host} does not resolve ({exc.strerror})")
            continue
        family, kind, proto, _name, address = addresses[0]
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(timeout_s)
            try:
                probe.connect(address)
            except ConnectionRefusedError:
                reasons.append(f"{host}:{port} refused the connection (no ZooKeeper listens "
                               "there)")
            except OSError as exc:
                reasons.append(f"{host}:{port} did not answer ({exc.strerror or exc})")
            else:
                reasons.append(f"{host}:{port} accepted a connection but no ZooKeeper "
                               "session opened (not ZooKeeper, or it is not serving)")
    return "; ".join(reasons)
