"""Where a client sends the requests of replicated topics (docs/CLUSTER.md): a node that
does not lead a topic answers not_leader naming the leader's front, and the client sends
that topic's requests there from then on, until another not_leader moves it again. Any
node's address is enough to start with. Nodes that serve CURVE name the key the leader
serves under (`leader_curve`): the client's own key pair goes there with that server key."""

from __future__ import annotations

import collections
import dataclasses

from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.errors import ErrorCode, TopicsError

TOPICS_MAX = 10_000        # leaders remembered (least recently learned forgotten first)
HOPS_MAX = 3               # redirects followed at once before the retry backoff applies


class LeaderMap:
    def __init__(self):
        self._fronts: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._keys: dict[str, str] = {}       # a leader's front -> the CURVE key it serves

    def curve(self, front: str, own: CurveCredentials | None) -> CurveCredentials | None:
        """The credentials for a leader's front: ours, with the key it serves under."""
        key = self._keys.get(front)
        if own is None or key is None:
            return own
        return dataclasses.replace(own, server_public=key.encode("ascii"))

    def front(self, topic: str | None) -> str | None:
        return self._fronts.get(topic) if topic is not None else None

    def learn(self, topic: str | None, error: TopicsError) -> bool:
        """From an error of `topic`'s request: whether it named a leader to go to now.
        A not_leader naming none (no leader elected yet) forgets the topic's leader; the
        request is retried like any 503."""
        if topic is None or error.code is not ErrorCode.NOT_LEADER:
            return False
        front = (error.detail or {}).get("leader_front")
        if not front:
            self._fronts.pop(topic, None)
            return False
        self._fronts[topic] = front
        self._fronts.move_to_end(topic)
        key = (error.detail or {}).get("leader_curve")
        if key and len(self._keys) < TOPICS_MAX:
            self._keys[front] = key
        while len(self._fronts) > TOPICS_MAX:
            self._fronts.popitem(last=False)
        return True

    def forget(self, topic: str | None) -> bool:
        """The leader's front went silent: ask the local node again. Whether a leader was
        known."""
        return topic is not None and self._fronts.pop(topic, None) is not None
