"""The node's place in a cluster: its one ZooKeeper session, held by the supervisor.

A thread of its own does the talking, so a slow or absent ZooKeeper never stalls the
supervisor's care of its children: it registers the node, campaigns for the controller
role whenever membership changes, and while it is the controller re-elects the leader of
every topic whose leader left (cluster/leader_election.py). The supervisor reads `view()`,
a snapshot kept under a lock, to answer `GET /v0/cluster`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from topics_actors.cluster import reassignment, role_table
from topics_actors.cluster.leader_election import new_topic, reelect
from topics_actors.cluster.metadata_store import MetadataStore, Versioned
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.control import IsrChange, PlaceTopic, TopicChange
from topics_actors.protocol.messages import Reassign

from . import move_request
from topics_actors.topic_config import parse_config
from topics_actors.topic_identity import topic_id

log = logging.getLogger(__name__)

RECHECK_MS = 300        # also re-read every topic's state this often: how soon a node learns
                        # a leader or ISR another node wrote (O(topics) reads a pass)
QUICK_MS = 50           # how often instead, for QUICK_S after the membership changed: the
QUICK_S = 2.0           # controller writes new leaders right after, which every node should
                        # know at once (failover, docs/CLUSTER.md 5)
REQUESTS_MAX = 4_096    # shards' ISR changes and placements waiting for the thread
REFUSED_MAX = 256       # placements refused, kept for the shards to answer with
ABSENT_MAX = 256        # names looked up and not found, kept for the shards to answer with


class ClusterMember:
    def __init__(self, store: MetadataStore, info: dict, session_timeout_ms: int = 0):
        """`session_timeout_ms`: how long a registration waits for a session from before a
        restart to end (MetadataStore.register)."""
        self.store = store
        self.info = info
        self._register_wait_s = session_timeout_ms / 1000 * 1.5 if session_timeout_ms else 0
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._view: dict = {"node_id": store.node_id, "controller": None, "nodes": {},
                            "topics": {}, "session": "connecting"}
        self._thread = threading.Thread(target=self._run, name="cluster-member", daemon=True)
        self._requests: collections.deque = collections.deque(maxlen=REQUESTS_MAX)
        self.moves = move_request.MoveDesk(store)     # operators' moves for the thread
        self._roles: list[dict] = []
        self._peer_keys: list[str] = []
        self._roles_serial = 0
        self._info_dirty = False
        self._fenced = False
        self._quick_until = 0.0                # monotonic: re-read quickly until then
        self._refused: dict[str, str] = {}     # topic -> why it could not be placed
        self._absent: dict[str, int] = {}      # looked up (asked_ns), no live state then

    def join(self) -> None:
        """Register the node; from now on membership changes wake the thread. A node that
        starts again after a drain takes new copies again."""
        self.store.register(self.info, self._register_wait_s)
        self.store.set_draining(self.store.node_id, False)
        self.store.watch_nodes(self._membership_changed)
        self.store.znodes.on_state(self._changed.set)    # fence at once when cut off

    def _membership_changed(self, _names=None) -> None:
        self._quick_until = time.monotonic() + QUICK_S
        self._changed.set()

    def start(self) -> "ClusterMember":
        self.join()
        self._thread.start()
        return self

    def alive(self) -> bool:
        """False once a bug ended the thread (the supervisor then stops the node)."""
        return self._stopping.is_set() or self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._changed.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self.store.znodes.close()

    def view(self) -> dict:
        with self._lock:
            return dict(self._view)

    def roles(self) -> tuple[int, list[dict], bool, dict[str, str], dict[str, int]]:
        """(serial, the replication state of every topic, fenced, refused placements,
        names looked up and not found with when they were asked) for the shards; the
        serial changes whenever any of them (or the peer keys) does. Fenced: the session is
        not connected (SUSPENDED or LOST), so no leader here may acknowledge `acks: all`."""
        with self._lock:
            return (self._roles_serial, self._roles, self._fenced, dict(self._refused),
                    dict(self._absent))

    def peer_keys(self) -> list[str]:
        """The CURVE public keys of the registered nodes (role_table.peer_keys)."""
        with self._lock:
            return self._peer_keys

    def _fence(self, fenced: bool) -> None:
        with self._lock:
            if fenced != self._fenced:
                self._fenced, self._roles_serial = fenced, self._roles_serial + 1
                log.warning("event=leaders_fenced" if fenced else "event=leaders_unfenced")

    def submit(self, msg: IsrChange | PlaceTopic | TopicChange) -> None:
        """A shard's request (from the supervisor's loop): done by the thread."""
        self._requests.append(msg)
        self._changed.set()

    def admin(self, msg: Reassign, answer) -> None:
        """An operator's move (from the front's thread), done and answered by the thread:
        `answer(body, error)`."""
        if self.moves.take(msg, answer):
            self._changed.set()

    def set_shards(self, endpoints: list[str]) -> None:
        """This node's shard endpoints, which followers fetch from: registered once known."""
        self._register("shards", endpoints)

    def set_quarantined(self, topics: list[str]) -> None:
        """Topics recovery quarantined here: registered, so the controller never makes
        this node their leader (the promotion gate) and moves their leadership away."""
        self._register("quarantined", topics)

    def set_unsettled(self, topics: dict[str, int]) -> None:
        """Copies here that recovered in a leader epoch and may not lead in it: registered,
        so the controller gives the topic a new epoch if this node leads it."""
        self._register("unsettled", topics)

    def _register(self, key: str, value) -> None:
        with self._lock:
            if value == self.info.get(key):
                return
            self.info = {**self.info, key: value}
            self._info_dirty = True
        self._changed.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            quick = time.monotonic() < self._quick_until
            self._changed.wait((QUICK_MS if quick else RECHECK_MS) / 1000)
            self._changed.clear()
            if self._stopping.is_set():
                return
            try:
                self.turn()
            except TopicsError as exc:
                log.warning("event=cluster_turn_failed error=%s", exc)
            except AssertionError:            # a bug (InvariantViolation): alive() says so
                log.critical("event=cluster_member_failed", exc_info=True)
                return
            except Exception:                 # kazoo's connection errors among them
                log.exception("event=cluster_turn_failed")

    def turn(self) -> None:
        """One pass: campaign, reconcile as the controller, refresh the view. Each topic's
        state is read once a pass and serves both."""
        session = self.store.znodes.state()
        self._fence(session != "connected")
        if session != "connected":
            with self._lock:
                self._view = {**self._view, "session": session}
            self.moves.serve(None)
            return
        if self._info_dirty:
            with self._lock:
                info, self._info_dirty = self.info, False
            self.store.update_registration(info)
        nodes = self._rejoin(self.store.nodes())
        if self.store.campaign():
            nodes = self.store.nodes()
        self.moves.serve(nodes)
        draining = self.store.draining()
        self._serve_requests(nodes, draining)
        states = {topic: found for topic in self.store.topics()
                  if (found := self.store.read(topic)) is not None}
        if self.store.controller_epoch:
            self.reconcile(nodes, states)
        roles = role_table.roles(states, nodes)
        keys = role_table.peer_keys(nodes)
        with self._lock:
            found = [t for t in self._absent if t in states and not states[t].state.deleted]
            for topic in found:
                del self._absent[topic]
            self._roles_serial += bool(found)
            self._view = {"node_id": self.store.node_id, "session": session,
                          "controller": self.store.controller(), "nodes": nodes,
                          "draining": sorted(draining),
                          "topics": {t: v.state.view() for t, v in states.items()
                                     if not v.state.deleted}}
            if roles != self._roles or keys != self._peer_keys:
                self._roles, self._peer_keys = roles, keys
                self._roles_serial += 1

    def _rejoin(self, nodes: dict[str, dict]) -> dict[str, dict]:
        """After ZooKeeper ended our session (a pause past its timeout), kazoo opens a new
        one: register again, and stop acting as a controller that was deposed meanwhile."""
        store = self.store
        if store.controller_epoch and store.controller() != store.node_id:
            log.warning("event=controller_deposed node=%s", store.node_id)
            store.controller_epoch = 0
        if store.node_id in nodes:
            return nodes
        log.warning("event=session_renewed node=%s action=registering_again", store.node_id)
        store.controller_epoch = 0
        with self._lock:
            info = self.info
        store.register(info)
        store.watch_nodes(self._membership_changed)
        return store.nodes()

    def _serve_requests(self, nodes: dict[str, dict], draining: frozenset[str] = frozenset()
                        ) -> None:
        while self._requests:
            msg = self._requests.popleft()
            if type(msg) is IsrChange:
                self._change_isr(msg, nodes)
            elif type(msg) is TopicChange:
                self._change(msg)
            else:
                self._place(msg, nodes, draining)

    def _change_isr(self, msg: IsrChange, nodes: dict[str, dict]) -> None:
        """A leader's ISR proposal, without the nodes ZooKeeper does not list as live: a
        node whose session ended is out even while its shards still fetch (else the
        controller and the leader would take it out and put it back by turns)."""
        current = self.store.read(msg.topic)
        live = [node for node in msg.isr if node in nodes]
        after = current and role_table.isr_changed(current.state, self.store.node_id,
                                                   msg.leader_epoch, live)
        if after and self.store.swap(msg.topic, after, current.version):
            log.info("event=isr_changed topic=%s leader_epoch=%d isr=%s", msg.topic,
                     after.leader_epoch, ",".join(after.isr))

    def _change(self, msg: TopicChange) -> None:
        """A leader's new config for its topic, or its deletion, written by
        compare-and-swap; a lost race is tried again by the shard's next request."""
        current = self.store.read(msg.topic)
        node = self.store.node_id
        try:
            after = current and (
                role_table.deleted(current.state, node, msg.leader_epoch) if msg.delete else
                role_table.config_changed(msg.topic, current.state, node, msg.leader_epoch,
                                          msg.config or {}))
        except TopicsError as error:
            log.warning("event=topic_change_refused topic=%s error=%s", msg.topic,
                        error.message)
            return
        if after and self.store.swap(msg.topic, after, current.version):
            log.info("event=topic_%s topic=%s leader_epoch=%d",
                     "deleted" if msg.delete else "reconfigured", msg.topic, msg.leader_epoch)

    def _place(self, msg: PlaceTopic, nodes: dict[str, dict], draining: set[str]) -> None:
        """Create the topic's state unless it exists (the first creator wins; a deleted
        topic's tombstone is replaced, its epochs continued) on live nodes that are not
        drained, if enough are; a topic that cannot be placed is reported back to the
        shards as refused."""
        found = self.store.read(msg.topic, fresh=not msg.create)
        live = found is not None and not found.state.deleted
        if not msg.create:
            # A lookup: with no live state the waiting shard answers topic_not_found now,
            # not after its wait; a live one reaches the shards with this turn's states.
            if not live:
                self._note(self._absent, msg.topic, msg.asked_ns, ABSENT_MAX)
            return
        if live:
            return
        try:
            config = parse_config(msg.config, msg.topic)
            kept = sorted(n for n in nodes if n not in draining)
            state = new_topic(kept if len(kept) >= config.replication_factor else sorted(nodes),
                              config.replication_factor, topic_id(msg.topic),
                              self.store.controller_epoch, config.to_json(),
                              local=self.store.node_id,
                              first_epoch=found.state.leader_epoch + 1 if found else 1)
        except TopicsError as error:
            log.warning("event=place_failed topic=%s error=%s", msg.topic, error.message)
            self._note(self._refused, msg.topic, error.message, REFUSED_MAX)
            return
        with self._lock:
            self._refused.pop(msg.topic, None)
        if (self.store.swap(msg.topic, state, found.version) if found
                else self.store.create(msg.topic, state)):
            log.info("event=topic_placed topic=%s replicas=%s leader=%s", msg.topic,
                     ",".join(state.replicas), state.leader)

    def _note(self, table: dict, topic: str, value, limit: int) -> None:
        """Record an answer for the shards (newest `limit` kept); new ones are re-sent."""
        with self._lock:
            if topic in table and table[topic] == value:
                return
            table[topic] = value
            while len(table) > limit:
                table.pop(next(iter(table)))
            self._roles_serial += 1

    def reconcile(self, nodes: dict[str, dict], states: dict[str, Versioned]) -> int:
        """Re-elect where a leader or an ISR member left, and take the next step of each
        move under way (cluster/reassignment.py); `states` is updated with what was
        written. The number of topics changed."""
        live, changed = set(nodes), 0
        for topic, current in states.items():
            if current.state.deleted:
                continue
            quarantined = {node for node, info in nodes.items()
                           if topic in info.get("quarantined", ())}
            leader = nodes.get(current.state.leader) or {}
            after = reelect(current.state, live, quarantined, self.store.controller_epoch,
                            (leader.get("unsettled") or {}).get(topic))
            event = "leader_changed"
            if after is None:
                after = reassignment.step(current.state, live, quarantined,
                                          self.store.controller_epoch)
                event = "move_step"
            if after is not None and self.store.swap(topic, after, current.version,
                                                     as_controller=True):
                states[topic] = Versioned(after, current.version + 1)
                changed += 1
                log.info("event=%s topic=%s leader=%s leader_epoch=%d isr=%s replicas=%s "
                         "target=%s", event, topic, after.leader, after.leader_epoch,
                         ",".join(after.isr), ",".join(after.replicas),
                         ",".join(after.target or ()) or "-")
        return changed


def join_cluster(zk: str, session_timeout_ms: int, node_id: str,
                 info: dict) -> ClusterMember | None:
    """Open the node's ZooKeeper session at `zk` and register `info`; None (logged) if it
    cannot."""
    from topics_actors.cluster.zookeeper_znodes import ZooKeeperZnodes  # kazoo: TOPICS_ZK only
    try:
        znodes = ZooKeeperZnodes(zk, session_timeout_ms)
    except TopicsError as error:
        log.error("event=start_refused reason=%r", error.message)
        return None
    try:
        member = ClusterMember(MetadataStore(znodes, node_id), info,
                               session_timeout_ms).start()
    except TopicsError as error:
        znodes.close()
        log.error("event=start_refused reason=%r", error.message)
        return None
    log.info("event=cluster_joined node_id=%s zk=%s", node_id, zk)
    return member
