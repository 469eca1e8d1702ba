"""The node's place in a cluster: its one ZooKeeper session, held by the supervisor.

A thread of its own does the talking, so a slow or absent ZooKeeper never stalls the
supervisor's care of its children: it registers the node, campaigns for the controller
role whenever membership changes, and while it is the controller re-elects the leader of
every topic whose leader left (cluster/leader_election.py). The supervisor reads `view()`,
a snapshot kept under a lock, to answer `GET /v0/cluster`.
"""

from __future__ import annotations

import logging
import threading

from topics_actors.cluster.leader_election import reelect
from topics_actors.cluster.metadata_store import MetadataStore, Versioned
from topics_actors.errors import TopicsError

log = logging.getLogger(__name__)

RECHECK_MS = 1_000      # also re-reconcile this often: a lost watch must not strand a topic
                        # (each pass reads every replicated topic's state: O(topics)/s)


class ClusterMember:
    def __init__(self, store: MetadataStore, info: dict):
        self.store = store
        self.info = info
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._view: dict = {"node_id": store.node_id, "controller": None, "nodes": {},
                            "topics": {}, "session": "connecting"}
        self._thread = threading.Thread(target=self._run, name="cluster-member", daemon=True)

    def join(self) -> None:
        """Register the node; from now on membership changes wake the thread."""
        self.store.register(self.info)
        self.store.watch_nodes(lambda _names: self._changed.set())

    def start(self) -> "ClusterMember":
        self.join()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._changed.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.store.znodes.close()

    def view(self) -> dict:
        with self._lock:
            return dict(self._view)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._changed.wait(RECHECK_MS / 1000)
            self._changed.clear()
            if self._stopping.is_set():
                return
            try:
                self.turn()
            except TopicsError as exc:
                log.warning("event=cluster_turn_failed error=%s", exc)
            except Exception:                 # kazoo's connection errors among them
                log.exception("event=cluster_turn_failed")

    def turn(self) -> None:
        """One pass: campaign, reconcile as the controller, refresh the view. Each topic's
        state is read once a pass and serves both."""
        session = self.store.znodes.state()
        if session != "connected":
            with self._lock:
                self._view = {**self._view, "session": session}
            return
        self.store.campaign()
        nodes = self.store.nodes()
        states = {topic: found for topic in self.store.topics()
                  if (found := self.store.read(topic)) is not None}
        if self.store.controller_epoch:
            self.reconcile(nodes, states)
        with self._lock:
            self._view = {"node_id": self.store.node_id, "session": session,
                          "controller": self.store.controller(), "nodes": nodes,
                          "topics": {t: v.state.view() for t, v in states.items()}}

    def reconcile(self, nodes: dict[str, dict], states: dict[str, Versioned]) -> int:
        """Re-elect where a leader or an ISR member left; `states` is updated with what was
        written. The number of topics changed."""
        live, changed = set(nodes), 0
        for topic, current in states.items():
            quarantined = {node for node, info in nodes.items()
                           if topic in info.get("quarantined", ())}
            after = reelect(current.state, live, quarantined, self.store.controller_epoch)
            if after is not None and self.store.swap(topic, after, current.version,
                                                     as_controller=True):
                states[topic] = Versioned(after, current.version + 1)
                changed += 1
                log.info("event=leader_changed topic=%s leader=%s leader_epoch=%d isr=%s",
                         topic, after.leader, after.leader_epoch, ",".join(after.isr))
        return changed
