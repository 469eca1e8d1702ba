"""The cluster's metadata in ZooKeeper, laid out as Kafka laid it out before KRaft:

    /topics/nodes/<node_id>         ephemeral: {"advertise", "http_port", "zmq_port", ...}
    /topics/controller              ephemeral: {"node", "epoch"}
    /topics/controller_epoch        the controller generation, bumped by each new controller
    /topics/state/<topic>           ReplicaState, changed only by versioned compare-and-swap
    /topics/draining                the nodes drained (JSON list): new topics avoid them

A node's registration lives exactly as long as its session, so "the node is gone" is a
fact ZooKeeper decides, not a timeout of ours. A controller's writes are fenced by the
version of /topics/controller_epoch it saw when it won: once another controller bumps it,
every write of the old one fails.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, NamedTuple

import orjson

from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.cluster.znodes import Znodes
from topics_actors.errors import ErrorCode, TopicsError

log = logging.getLogger(__name__)

ROOT = "/topics"
NODES = f"{ROOT}/nodes"
CONTROLLER = f"{ROOT}/controller"
CONTROLLER_EPOCH = f"{ROOT}/controller_epoch"
STATES = f"{ROOT}/state"
DRAINING = f"{ROOT}/draining"


class Versioned(NamedTuple):
    state: ReplicaState
    version: int


class MetadataStore:
    def __init__(self, znodes: Znodes, node_id: str):
        self.znodes = znodes
        self.node_id = node_id
        self.controller_epoch = 0          # the generation this node won, 0: not controller
        self._fence_version = -1           # /topics/controller_epoch's version at the win

    # --- membership ------------------------------------------------------------------------

    def register(self, info: dict, wait_s: float = 0.0) -> None:
        """Announce this node. Another session may hold the id: most often this node's own,
        from before a kill -9 and a quick restart, which ZooKeeper ends within its timeout;
        so the registration waits up to `wait_s` for it to go (saying so), and is refused
        only if it is still there then: another live node has the id (two nodes configured
        with one TOPICS_NODE_ID must not both serve)."""
        path, data = f"{NODES}/{self.node_id}", orjson.dumps(info)
        deadline = time.monotonic() + wait_s
        waited = False
        while not self.znodes.create(path, data, ephemeral=True):
            if time.monotonic() >= deadline:
                raise TopicsError(
                    f"node id {self.node_id!r} is registered by another live node (its "
                    f"session did not end within {wait_s:.1f} s: two nodes with one id?)",
                    ErrorCode.NOT_READY)
            if not waited:
                waited = True
                log.warning("event=node_id_held node=%s action=waiting_for_its_session_to_end "
                            "wait_s=%.1f (this node's own session from before a restart "
                            "ends within the session timeout)", self.node_id, wait_s)
            time.sleep(0.1)
        if waited:
            log.warning("event=node_id_reclaimed node=%s", self.node_id)

    def update_registration(self, info: dict) -> bool:
        """Replace this node's registration (its shards' endpoints arrived)."""
        path = f"{NODES}/{self.node_id}"
        entry = self.znodes.get(path)
        return entry is not None and self.znodes.set(path, orjson.dumps(info), entry[1])

    def nodes(self) -> dict[str, dict]:
        found = {}
        for name in self.znodes.children(NODES):
            entry = self.znodes.get(f"{NODES}/{name}")
            if entry is not None:            # it may have left between the two calls
                found[name] = orjson.loads(entry[0])
        return found

    def watch_nodes(self, callback: Callable[[list[str]], None]) -> None:
        self.znodes.watch_children(NODES, callback)

    # --- the controller --------------------------------------------------------------------

    def campaign(self) -> int:
        """Become the controller if there is none: the new generation, 0 if another node
        holds the role."""
        if self.controller_epoch:
            return self.controller_epoch
        self.znodes.create(CONTROLLER_EPOCH, b"0")
        if not self.znodes.create(CONTROLLER, orjson.dumps({"node": self.node_id}),
                                  ephemeral=True):
            return 0
        while True:         # bump the generation; a racing old controller only delays us
            raw, version = self.znodes.get(CONTROLLER_EPOCH)
            if self.znodes.set(CONTROLLER_EPOCH, b"%d" % (int(raw) + 1), version):
                self.controller_epoch, self._fence_version = int(raw) + 1, version + 1
                log.info("event=controller_elected node=%s epoch=%d", self.node_id,
                         self.controller_epoch)
                return self.controller_epoch

    def controller(self) -> str | None:
        entry = self.znodes.get(CONTROLLER)
        return None if entry is None else orjson.loads(entry[0])["node"]

    # --- topic states ----------------------------------------------------------------------

    def topics(self) -> list[str]:
        return self.znodes.children(STATES)

    def read(self, topic: str, fresh: bool = False) -> Versioned | None:
        """The topic's state; `fresh`: as of now, every acknowledged write seen (a lookup
        after another node's create was answered: read-your-writes)."""
        if fresh:
            self.znodes.sync(f"{STATES}/{topic}")
        entry = self.znodes.get(f"{STATES}/{topic}")
        return None if entry is None else Versioned(ReplicaState.from_bytes(entry[0]),
                                                    entry[1])

    def create(self, topic: str, state: ReplicaState) -> bool:
        """False if the topic has a state already."""
        return self.znodes.create(f"{STATES}/{topic}", state.to_bytes())

    def swap(self, topic: str, state: ReplicaState, version: int, *,
             as_controller: bool = False) -> bool:
        """Replace the state read at `version`; False if anyone wrote it since, or (as the
        controller) if a newer controller exists."""
        path = f"{STATES}/{topic}"
        if not as_controller:
            return self.znodes.set(path, state.to_bytes(), version)
        if not self.controller_epoch:
            return False
        return self.znodes.set_fenced(CONTROLLER_EPOCH, self._fence_version, path,
                                      state.to_bytes(), version)

    # --- drained nodes ---------------------------------------------------------------------

    def draining(self) -> set[str]:
        """The nodes an operator drained (docs/CLUSTER.md 8): no new copy is placed on
        them while other nodes can take it."""
        entry = self.znodes.get(DRAINING)
        return set() if entry is None else set(orjson.loads(entry[0]))

    def set_draining(self, node: str, draining: bool) -> None:
        """Mark `node` drained, or no longer (its next start), by compare-and-swap."""
        self.znodes.create(DRAINING, b"[]")
        while True:
            raw, version = self.znodes.get(DRAINING)
            before = set(orjson.loads(raw))
            after = before | {node} if draining else before - {node}
            if after == before or self.znodes.set(DRAINING, orjson.dumps(sorted(after)),
                                                  version):
                return
