"""Znodes over a real ZooKeeper session (kazoo): the thin shell of cluster/znodes.py.

kazoo runs its own threads and sockets, so a client is made in the process that uses it,
never inherited across a fork. Its SUSPENDED state (connection down, session perhaps
alive) is reported as "suspended": a leader must stop acking `all` writes then, not only
once the session is LOST.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from topics_actors.cluster.znodes import ChildWatch
from topics_actors.errors import TopicsError, ErrorCode

log = logging.getLogger(__name__)

_STATES = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
           KazooState.LOST: "lost"}


class ZooKeeperZnodes:
    def __init__(self, connect: str, session_timeout_ms: int, connect_timeout_ms: int = 10_000):
        self.client = KazooClient(hosts=connect, timeout=session_timeout_ms / 1000,
                                  connection_retry={"max_tries": -1, "max_delay": 1})
        self._state = "lost"
        self.client.add_listener(self._on_state)
        try:
            self.client.start(timeout=connect_timeout_ms / 1000)
        except Exception as exc:      # kazoo raises its own timeout type
            self.client.close()
            raise TopicsError(f"no ZooKeeper at {connect} ({exc})", ErrorCode.NOT_READY) \
                from exc
        self._state = "connected"

    def _on_state(self, state: KazooState) -> None:
        self._state = _STATES.get(state, "lost")
        log.info("event=zookeeper_session state=%s", self._state)

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
