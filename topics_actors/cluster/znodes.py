"""The few ZooKeeper operations the cluster metadata needs, as an interface, and an
in-memory ensemble that behaves the same way (for unit tests of the controller and the
metadata store without a JVM).

Semantics follow ZooKeeper: every node has a version bumped by each write; a write names
the version it read and fails if another write came first; ephemeral nodes belong to a
session and vanish when it ends; child watches fire after the children change.
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

ChildWatch = Callable[[list[str]], None]


class Znodes(Protocol):
    def create(self, path: str, data: bytes, ephemeral: bool = False) -> bool:
        """False if the node exists already (parents are made as needed)."""

    def get(self, path: str) -> tuple[bytes, int] | None:
        """(data, version), None if there is no such node."""

    def set(self, path: str, data: bytes, version: int) -> bool:
        """False if the node changed since `version` (or is gone)."""

    def set_fenced(self, fence: str, fence_version: int, path: str, data: bytes,
                   version: int) -> bool:
        """`set`, atomically only if `fence` is still at `fence_version`."""

    def children(self, path: str) -> list[str]:
        """Sorted child names, [] if the node does not exist."""

    def sync(self, path: str) -> None:
        """Bring this session's server up to the ensemble's leader for `path`, so the next
        read sees every write acknowledged before (ZooKeeper reads are otherwise served by
        whichever server the session is on, possibly behind)."""

    def watch_children(self, path: str, callback: ChildWatch) -> None:
        """Call `callback(children)` now and after every change, until closed."""

    def state(self) -> str:
        """"connected", "suspended" (the link is down, the session may survive) or "lost"."""

    def on_state(self, callback: Callable[[], None]) -> None:
        """Call `callback()` whenever `state()` may have changed."""

    def close(self) -> None:
        ...


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class MemoryEnsemble:
    """One shared tree; each MemoryZnodes on it is a session."""

    def __init__(self):
        self.lock = threading.RLock()
        self.nodes: dict[str, list] = {"/": [b"", 0, None]}   # path -> [data, version, owner]
        self.watches: list[tuple[str, ChildWatch, object]] = []

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.nodes
                      if p.startswith(prefix) and "/" not in p[len(prefix):] and p != "/")

    def fire(self, path: str) -> None:
        for watched, callback, _ in list(self.watches):
            if watched == path:
                callback(self.children(path))

    def expire(self, session: object) -> None:
        with self.lock:
            gone = [p for p, node in self.nodes.items() if node[2] is session]
            for path in gone:
                del self.nodes[path]
            self.watches = [w for w in self.watches if w[2] is not session]
            for path in {parent_of(p) for p in gone}:
                self.fire(path)


class MemoryZnodes:
    def __init__(self, ensemble: MemoryEnsemble):
        self.ensemble = ensemble
        self.closed = False

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> bool:
        with self.ensemble.lock:
            nodes = self.ensemble.nodes
            if path in nodes:
                return False
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts)):
                nodes.setdefault("/" + "/".join(parts[:depth]), [b"", 0, None])
            nodes[path] = [data, 0, self if ephemeral else None]
            self.ensemble.fire(parent_of(path))
            return True

    def get(self, path: str) -> tuple[bytes, int] | None:
        with self.ensemble.lock:
            node = self.ensemble.nodes.get(path)
            return None if node is None else (node[0], node[1])

    def set(self, path: str, data: bytes, version: int) -> bool:
        with self.ensemble.lock:
            node = self.ensemble.nodes.get(path)
            if node is None or node[1] != version:
                return False
            node[0], node[1] = data, version + 1
            return True

    def set_fenced(self, fence: str, fence_version: int, path: str, data: bytes,
                   version: int) -> bool:
        with self.ensemble.lock:
            fenced = self.ensemble.nodes.get(fence)
            if fenced is None or fenced[1] != fence_version:
                return False
            return self.set(path, data, version)

    def children(self, path: str) -> list[str]:
        with self.ensemble.lock:
            return self.ensemble.children(path)

    def sync(self, path: str) -> None:
        return None          # one tree: always current

    def watch_children(self, path: str, callback: ChildWatch) -> None:
        with self.ensemble.lock:
            self.ensemble.watches.append((path, callback, self))
            callback(self.ensemble.children(path))

    def state(self) -> str:
        return "lost" if self.closed else "connected"

    def on_state(self, callback: Callable[[], None]) -> None:
        pass                        # the state changes only with close()

    def close(self) -> None:
        self.closed = True
        self.ensemble.expire(self)
