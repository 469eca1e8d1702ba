"""Which requests a shard takes for a replicated topic, and how a replicated topic is
created (docs/CLUSTER.md).

Every request naming a replicated topic goes to its leader: elsewhere it is refused
`not_leader` with where the topic is led, which the gateway and the client library follow.
Operations whose effects are not replicated yet (record deletes, queue leases, routers into
the topic, topic deletion, config changes) are refused with a clear error rather than let
the copies drift apart. A `put_topic` with replication_factor > 1 asks the supervisor to
have the cluster place the topic and waits until its state arrives.
"""

from __future__ import annotations

from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.protocol.messages import (
    Ack, Append, Claim, DeleteRecords, DeleteTopic, EpochQuery, Extend, Held, Nack, PutRouter,
    PutTopic, ReplicaFetch,
)
from topics_actors.shard.batch_stager import Staged, read_op
from topics_actors.shard.long_poll import Park
from topics_actors.shard.replica_book import PLACE_PREFIX, ReplicaAnswer, ReplicaBook
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.topic_config import parse_config

PLACE_WAIT_MS = 5_000
NOT_REPLICATED_YET = (DeleteRecords, Claim, Ack, Nack, Extend, Held, PutRouter, DeleteTopic)
_OWN_CHECKS = (ReplicaFetch, EpochQuery, ReplicaAnswer, Append, PutTopic)


class ReplicaRules:
    def __init__(self, book: ReplicaBook, registry: TopicRegistry):
        self.book = book
        self.registry = registry

    def _replicated(self, name: str) -> bool:
        if name in self.book.roles:
            return True
        topic = self.registry.get(name)
        return topic is not None and topic.config.replicated

    def check(self, msg) -> None:
        """Raise unless this shard may take `msg` for its topic (enabled nodes only)."""
        if type(msg) in _OWN_CHECKS and type(msg) is not PutTopic:
            return
        if not self._replicated(msg.topic):
            return
        if msg.topic not in self.book.roles:
            raise TopicsError(f"the replication state of {msg.topic!r} has not arrived yet",
                              ErrorCode.NOT_READY, {"reason": "replication_state"})
        if type(msg) in NOT_REPLICATED_YET:
            raise invalid(f"{msg.KIND} is not supported on replicated topics yet "
                          f"(docs/CLUSTER.md)")
        self.book.check_request(msg)
        if type(msg) is PutTopic:
            topic = self.registry.get(msg.topic)
            if topic is not None and parse_config(msg.config, msg.topic) != topic.config:
                raise invalid("the config of a replicated topic cannot change yet")

    def applies(self, msg: Append) -> bool:
        """Whether an append goes by the replication rules."""
        if not self.book.enabled:
            return False
        if self._replicated(msg.topic):
            if msg.topic not in self.book.roles:
                raise TopicsError(f"the replication state of {msg.topic!r} has not arrived "
                                  f"yet", ErrorCode.NOT_READY, {"reason": "replication_state"})
            return True
        if msg.config is not None and self.registry.get(msg.topic) is None and (
                parse_config(msg.config, msg.topic).replicated):
            raise invalid("create a replicated topic with put_topic, not by an append")
        return False

    def places(self, msg: PutTopic) -> bool:
        return (self.book.enabled and msg.topic not in self.book.roles
                and self.registry.get(msg.topic) is None
                and parse_config(msg.config, msg.topic).replicated)

    def place(self, msg: PutTopic) -> Staged:
        """Ask the cluster to place the topic; answer once its state is here."""
        config = parse_config(msg.config, msg.topic)
        self.book.placing[msg.topic] = config.to_json()

        def now() -> dict:
            if msg.topic not in self.book.roles:
                raise TopicsError(f"the cluster has not placed {msg.topic!r} yet; retry",
                                  ErrorCode.NOT_READY, {"reason": "placing"})
            self.book.check_request(msg)
            topic = self.registry.get(msg.topic)
            return {"topic": msg.topic, "created": True,
                    "config": (topic.config if topic is not None else config).to_json()}

        def answer(_info):
            if msg.topic in self.book.roles:
                return now()
            return Park(PLACE_PREFIX + msg.topic, PLACE_WAIT_MS, now)
        return read_op(answer)
