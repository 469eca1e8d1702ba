"""An operator's move of topics between nodes (POST /v0/cluster/move and /drain, `topics
cluster move|drain`), as the node's cluster member serves it: the target of each topic is
checked and stored in the topic's state by compare-and-swap; the controller carries the
moves out (cluster/reassignment.py). A drained node is also marked, so that no new topic
is placed on it until it starts again; the copies of a drain go only to nodes not drained.
Runs on the cluster member's thread, the only one that talks to ZooKeeper."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

from topics_actors.cluster import reassignment
from topics_actors.cluster.metadata_store import MetadataStore
from topics_actors.cluster.replica_state import ReplicaState
from topics_actors.errors import ErrorCode, TopicsError, invalid, topic_not_found
from topics_actors.protocol.messages import Reassign

log = logging.getLogger(__name__)

SWAP_TRIES = 20           # compare-and-swaps lost to leaders' ISR writes before giving up
MOVES_MAX = 64            # operators' moves waiting for the cluster member's thread

Answer = Callable[..., None]     # answer(body) or answer(None, error)


class MoveDesk:
    """The operators' moves waiting for the cluster member's thread, bounded."""

    def __init__(self, store: MetadataStore):
        self.store = store
        self.waiting: collections.deque[tuple[Reassign, Answer]] = collections.deque()

    def take(self, msg: Reassign, answer: Answer) -> bool:
        """Queue a move (from another thread); False: refused at once, too many wait."""
        if len(self.waiting) >= MOVES_MAX:
            answer(None, TopicsError("too many moves wait for the cluster; retry",
                                     ErrorCode.THROTTLED, {"retry_after_ms": 500}))
            return False
        self.waiting.append((msg, answer))
        return True

    def serve(self, nodes: dict[str, dict] | None) -> None:
        """Do and answer the moves waiting; `nodes` None: the session is down, refuse
        them now."""
        while self.waiting:
            msg, answer = self.waiting.popleft()
            if nodes is None:
                answer(None, TopicsError("this node's ZooKeeper session is not connected; "
                                         "retry", ErrorCode.NOT_READY))
                continue
            try:
                answer(serve(self.store, msg, nodes))
            except TopicsError as error:
                answer(None, error)
            except Exception as error:      # kazoo's connection errors among them
                answer(None, TopicsError(f"ZooKeeper failed the move: {error!r}; retry",
                                         ErrorCode.NOT_READY))
                raise


def serve(store: MetadataStore, msg: Reassign, nodes: dict[str, dict]) -> dict:
    """Store the targets `msg` asks for; {moves: [{topic, replicas, target}]} as stored."""
    live = sorted(nodes)
    if msg.drain is not None:
        states = {topic: found.state for topic in store.topics()
                  if (found := store.read(topic)) is not None}
        held = any(msg.drain in s.replicas for s in states.values() if not s.deleted)
        if msg.drain not in nodes and not held:
            raise TopicsError(f"node {msg.drain!r} is not registered and holds no copy",
                              ErrorCode.NOT_FOUND, {"live": live})
        others = [n for n in live if n not in store.draining()]
        targets = reassignment.drain_targets(states, msg.drain, others)
        store.set_draining(msg.drain, True)       # new topics avoid it from now on
    else:
        if not msg.topic or msg.replicas is None:
            raise invalid("name a `topic` and its new `replicas`, or a node to `drain`")
        found = store.read(msg.topic, fresh=True)
        if found is None:
            raise topic_not_found(msg.topic)
        targets = {msg.topic: reassignment.checked_target(msg.topic, found.state,
                                                          msg.replicas, live)}
    moves = []
    for topic, target in targets.items():
        state = _store(store, topic, target)
        moves.append({"topic": topic, "replicas": list(state.replicas),
                      "target": list(state.target) if state.target is not None else None})
    log.info("event=move_requested drain=%s topics=%s", msg.drain or "-",
             ",".join(f"{m['topic']}->{'+'.join(m['target'] or m['replicas'])}"
                      for m in moves) or "-")
    return {"moves": moves}


def _store(store: MetadataStore, topic: str, target: tuple[str, ...]) -> ReplicaState:
    for _ in range(SWAP_TRIES):
        current = store.read(topic)
        if current is None or current.state.deleted:
            raise topic_not_found(topic)
        after = reassignment.moved(current.state, target)
        if after is None:
            return current.state
        if store.swap(topic, after, current.version):
            return after
    raise TopicsError(f"the state of {topic!r} kept changing; retry the move",
                      ErrorCode.NOT_READY)
