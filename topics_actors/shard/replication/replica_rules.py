"""Which requests a shard takes for a topic of a cluster, and how topics are created there
(docs/CLUSTER.md).

In a cluster every topic created is placed through ZooKeeper, so a name has one state for
the whole cluster and no node can create a second, local topic of a name another node
holds: a `put_topic`, or an append that would create its topic, asks the supervisor to
place it (a topic of one copy stays on this node) and parks until the state arrives; the
client then retries and is answered by the topic's leader. Every request naming a placed
topic goes to its leader: elsewhere it is refused `not_leader` with where the topic is led,
which the gateway and the client library follow. On a topic with several copies, the
operations whose effects are not replicated yet (routers into the topic) are refused with
a clear error rather than let the copies drift apart. A config change or a topic deletion is
made in the topic's cluster state by its leader (a deleted topic leaves a tombstone there),
and every copy takes it from there. Topics a node held before it joined a cluster stay its
own.
"""

from __future__ import annotations

from collections.abc import Callable

from topics_actors.errors import ErrorCode, TopicsError, invalid, topic_not_found
from topics_actors.protocol.control import ReplicaRoles
from topics_actors.protocol.messages import (
    Ack, Append, Checksum, Claim, DeleteRecords, DeleteTopic, Diff, EpochQuery, Extend,
    GetTopic, Held, Nack, PutRouter, PutTopic, ReplicaFetch, Scan,
)
from topics_actors.shard import topic_admin
from topics_actors.shard.replication import replica_report
from topics_actors.shard.batch_stager import CommitInfo, Staged, read_op
from topics_actors.shard.long_poll import Park
from topics_actors.shard.replication.leader_duties import AwaitHw
from topics_actors.shard.replication.placement import PlacementState
from topics_actors.shard.replication.replica_book import PLACE_PREFIX, ReplicaAnswer, ReplicaBook
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.topic_config import TopicConfig, parse_config

Handler = Callable[[object], Staged]

PLACE_WAIT_MS = 5_000
NOT_REPLICATED_YET = (PutRouter,)
_OWN_CHECKS = (ReplicaFetch, EpochQuery, ReplicaAnswer, Append, Checksum)   # Checksum: any copy
# A client's requests naming a topic this node neither holds nor knows the state of: the
# cluster is asked (afresh) before any answers topic_not_found, so a topic whose create
# another node answered is found here too (read-your-writes; an append looks up its own).
LOOKED_UP = (GetTopic, DeleteTopic, Diff, Scan, DeleteRecords, Claim, Ack, Nack, Extend,
             Held, PutRouter)


class ReplicaRules:
    def __init__(self, book: ReplicaBook, registry: TopicRegistry):
        self.book = book
        self.registry = registry

    def handlers(self, plain: dict[type, Handler]) -> dict[type, Handler]:
        """A cluster node's handler table from a single node's (ShardCore._handler_table):
        every request naming a topic is checked first (check); appends, topic requests
        and record deletes of replicated topics go by the rules here; the replication
        requests are the replica book's."""
        table = {kind: self._checked(handler) for kind, handler in plain.items()}
        put, delete, get = plain[PutTopic], plain[DeleteTopic], plain[GetTopic]
        append, delete_records = plain[Append], plain[DeleteRecords]
        table.update({
            Append: lambda m: self.append(m, append),       # its own checks
            PutTopic: self._checked(lambda m: self.put_topic(m, put)),
            DeleteTopic: self._checked(lambda m: self.delete_topic(m, delete)),
            GetTopic: self._checked(lambda m: self.get_topic(m, get)),
            DeleteRecords: self._checked(lambda m: self.delete_records(m, delete_records)),
            ReplicaRoles: self.book.take_roles,
            ReplicaFetch: self.book.answers.fetch,
            EpochQuery: self.book.answers.epoch_end,
            ReplicaAnswer: self.book.follower.apply,
        })
        return table

    def _checked(self, handler: Handler) -> Handler:
        def checked(msg) -> Staged:
            name = getattr(msg, "topic", None)
            if name is not None:
                if type(msg) in LOOKED_UP and self.unplaced(name):
                    return self._place(name, TopicConfig(), False, retry=True)
                self.check(msg)
                return self._led_elsewhere(name, handler(msg))
            return handler(msg)
        return checked

    def _led_elsewhere(self, name: str, staged: Staged) -> Staged:
        """A read answered after its topic's copy here was dropped (a move took it off,
        cluster/reassignment.py: in the batch of its roles, or while parked on it) is sent
        to the topic's leader, not_leader naming it: the topic lives on in the cluster, so
        topic_not_found would be wrong. A topic deleted meanwhile has no role: still
        topic_not_found."""
        is_write, fn = staged
        if is_write:
            return staged

        def redirected(answer):
            try:
                return answer()
            except TopicsError as error:
                if error.code is ErrorCode.TOPIC_NOT_FOUND and self.registry.get(name) is None:
                    self.book.leader.check_led(name)      # raises where a role names one
                raise

        def read(info: CommitInfo):
            body = redirected(lambda: fn(info))
            if isinstance(body, Park):
                return body._replace(answer=lambda: redirected(body.answer))
            return body
        return is_write, read

    # --- the requests that differ on a cluster node ------------------------------------------

    def append(self, msg: Append, plain: Handler) -> Staged:
        if self.unplaced(msg.topic):
            return self.locate(msg)
        if not self.applies(msg):
            return plain(msg)
        waits = self.book.leader.check_append(msg)
        is_write, fn = plain(msg)
        self.book.leader.note_key(msg.topic, msg.idempotency_key)
        if not waits:
            return is_write, fn

        def held(info: CommitInfo) -> AwaitHw:
            body = fn(info)
            return AwaitHw(msg.topic, body["last_seq"], body)
        return is_write, held

    def delete_records(self, msg: DeleteRecords, plain: Handler) -> Staged:
        if self.ops_replicated(msg):
            return self.book.leader.delete(msg)
        return plain(msg)

    def put_topic(self, msg: PutTopic, plain: Handler) -> Staged:
        if self.places(msg):
            return self.place(msg)
        if self.reconfigures(msg):
            return self.reconfigure(msg)
        return plain(msg)

    def delete_topic(self, msg: DeleteTopic, plain: Handler) -> Staged:
        if self.retires(msg):
            return self.retire(msg)
        return plain(msg)

    def get_topic(self, msg: GetTopic, plain: Handler) -> Staged:
        is_write, fn = plain(msg)
        if self.book.role(msg.topic) is None:
            return is_write, fn

        def with_replication(info: CommitInfo) -> dict:
            state = fn(info)
            state["replication"] = replica_report.view(self.book, msg.topic)
            return state
        return is_write, with_replication

    def _require_state(self, name: str) -> None:
        """A topic created from a cluster state whose state this shard lost (a restart)
        waits for the supervisor's next roles."""
        topic = self.registry.get(name)
        if self.book.role(name) is None and topic is not None and topic.config.replicated:
            raise TopicsError(f"the replication state of {name!r} has not arrived yet",
                              ErrorCode.NOT_READY, {"reason": "replication_state"})

    def check(self, msg) -> None:
        """Raise unless this shard may take `msg` for its topic (cluster nodes only)."""
        if type(msg) in _OWN_CHECKS:
            return
        self._require_state(msg.topic)
        role = self.book.role(msg.topic)
        if role is None:
            return
        copies = len(role.replicas)
        if copies > 1 and type(msg) in NOT_REPLICATED_YET:
            raise invalid(f"{msg.KIND} is not supported on replicated topics yet "
                          f"(docs/CLUSTER.md)")
        self.book.leader.check_led(msg.topic)
        if type(msg) is PutTopic:
            topic = self.registry.get(msg.topic)
            config = parse_config(msg.config, msg.topic)
            if (topic is not None and config.type == topic.config.type
                    and config.replication_factor != copies):
                raise invalid(f"the replication_factor of {msg.topic!r} cannot change "
                              f"(it has {copies} copies: there is no reassignment)")

    def ops_replicated(self, msg) -> bool:
        """Whether a record delete goes through the topic's op log: the topic has several
        copies (queue requests ask the replica book themselves, queue_ops.py)."""
        role = self.book.role(msg.topic)
        return role is not None and len(role.replicas) > 1

    # --- appends -----------------------------------------------------------------------------

    def unplaced(self, name: str) -> bool:
        """A topic this cluster node neither holds nor knows the state of."""
        return self.book.role(name) is None and self.registry.get(name) is None

    def applies(self, msg: Append) -> bool:
        """Whether an append goes by the replication rules (its topic has a state)."""
        self._require_state(msg.topic)
        return self.book.role(msg.topic) is not None

    def locate(self, msg: Append) -> Staged:
        """An append to a topic this node does not know: have the cluster find it, or place
        it when the append may create it, then let the client retry."""
        config = parse_config(msg.config, msg.topic) if msg.config is not None else None
        create = msg.create if msg.create is not None else (
            config.auto_create if config is not None else True)
        return self._place(msg.topic, config or TopicConfig(), create, retry=True)

    # --- put_topic ---------------------------------------------------------------------------

    def places(self, msg: PutTopic) -> bool:
        return self.unplaced(msg.topic)

    def place(self, msg: PutTopic) -> Staged:
        return self._place(msg.topic, parse_config(msg.config, msg.topic), True, retry=False)

    def retires(self, msg: DeleteTopic) -> bool:
        """A delete_topic of a placed topic (on its leader: check() ran): the topic's
        cluster state becomes a tombstone, and every copy drops the topic from there."""
        return self.book.role(msg.topic) is not None

    def retire(self, msg: DeleteTopic) -> Staged:
        """Ask the supervisor to write the topic's tombstone (the shell sends it while it
        is wanted); park until this shard has dropped its copy. Not in time: not_ready, and
        the client sends it again."""
        name = msg.topic
        topic = self.registry.get(name)
        if topic is not None:
            topic_admin.check_if_empty(msg, topic)
        placements = self.book.placements
        placements.want_deleted(name)
        return self._park_until(
            name, lambda: self.book.tombstoned(name) and self.registry.get(name) is None,
            {"topic": name, "deleted": True, "routers_removed": []}, "deleting",
            lambda: placements.forget_deletion(name))

    def reconfigures(self, msg: PutTopic) -> bool:
        """A put_topic that changes the config of a placed topic (on its leader: check()
        ran). The cluster's state holds the config, so the change is made there, and every
        copy takes it from there (replica_book.py); a type change is refused as on a single
        node (topic_admin.put)."""
        topic = self.registry.get(msg.topic)
        if topic is None or self.book.role(msg.topic) is None:
            return False
        config = parse_config(msg.config, msg.topic)
        return config != topic.config and config.type == topic.config.type

    def reconfigure(self, msg: PutTopic) -> Staged:
        """Ask the supervisor to write the new config into the topic's state (the shell
        sends it while it is wanted); park until the state carries it and this copy logged
        it. A put_topic not answered in time is answered not_ready: the client sends it
        again (it is idempotent)."""
        name = msg.topic
        wanted = parse_config(msg.config, name).to_json()
        placements = self.book.placements
        placements.want_config(name, wanted)
        return self._park_until(
            name, lambda: getattr(self.book.role(name), "config", None) == wanted,
            {"topic": name, "created": False, "config": wanted}, "reconfiguring",
            lambda: placements.forget_config(name))

    def _park_until(self, name: str, done, answer: dict, reason: str, forget) -> Staged:
        """Answer `answer` once `done()` (woken by the roles that bring the change), or
        not_ready after PLACE_WAIT_MS; `forget()` ends the shell's requests either way."""
        def now() -> dict:
            forget()
            if not done():
                raise TopicsError(f"the cluster has not made the change to {name!r} yet; "
                                  f"retry", ErrorCode.NOT_READY, {"reason": reason})
            return answer

        return read_op(lambda _info: now() if done() else
                       Park(PLACE_PREFIX + name, PLACE_WAIT_MS, now))

    def _place(self, name: str, config: TopicConfig, create: bool, retry: bool) -> Staged:
        """Ask the supervisor for the topic's state (creating it if `create`); park until it
        arrives. Then a retried request gets `not_ready` (the client sends it again and the
        shard that leads the topic takes it); a put_topic is answered here."""
        book, placements = self.book, self.book.placements
        placements.ask(name, config.to_json(), create)

        def now() -> dict:
            placement = placements.take(name)
            state = placement.state if placement is not None else None
            if state is PlacementState.REFUSED:
                raise TopicsError(placement.reason, ErrorCode.NOT_ENOUGH_REPLICAS,
                                  {"topic": name})
            if state is PlacementState.ABSENT:
                raise topic_not_found(name)
            if book.role(name) is None:
                if not create:
                    raise topic_not_found(name)
                raise TopicsError(f"the cluster has not placed {name!r} yet; retry",
                                  ErrorCode.NOT_READY, {"reason": "placing"})
            placed = book.role(name).config
            if retry or placed != config.to_json():
                # A put_topic whose name another request placed with another config is
                # sent again: its leader then takes it as a config change.
                raise TopicsError(f"{name!r} is placed; retry", ErrorCode.NOT_READY,
                                  {"reason": "placed"})
            # Answered here, leader or not: the state holds the config asked for (sent on
            # to a leader that already has its copy, it would answer 200 created: false).
            return {"topic": name, "created": True, "config": placed}

        def answer(_info):
            if book.role(name) is not None or placements.settled(name):
                return now()
            return Park(PLACE_PREFIX + name, PLACE_WAIT_MS, now)
        return read_op(answer)
