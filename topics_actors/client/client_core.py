"""The client library's sans-IO core (issue 31, on httpx's model): what each operation
sends, where a request goes, and what happens when it fails, written once for both
clients. It does no I/O: each operation is a flow, a generator that yields steps and is
given their results, which a transport runs (blocking_transport.py for Client,
async_transport.py for AsyncClient):

- `Call(target, msg, timeout_ms, connect_ms)`: one attempt; its result is the reply, or
  None when nothing came back in time; a TopicsError reply is thrown into the flow.
- `Pause(seconds)`: the backoff before the next attempt.
- `Fan(flows)`: run these flows (one per shard), in turn or at once; their results in order.
- `Refusal()`: the front's failed CURVE handshake as an error, or None.

Routing: each request goes straight to the shard owning its topic (the shard map, from the
front's `status`), or to the front when the client does not route (it forwards); a
replicated topic's requests go to the node a `not_leader` answer named (leader_map.py).
Retries: `not_ready` and `throttled` answers and silence (a shard that died) are retried
until `retry_deadline_ms`, refreshing the shard map so a restarted shard is found again
(retry_budget.py). Every append carries a key (the caller's idempotency_key, or one of the
client's session), so a retry of a write whose ack was lost returns the original seqs, on
the same leader or, the keys being replicated with the records, on a new one.

Failover (docs/CLUSTER.md 5): a leader on another node that stays silent for
LEADER_SILENCE_MS is looked up again at the client's own node, which knows a new leader
within about 0.3 s of its election, so requests move on within about half a second of it,
not after the request timeout. A client whose own node went silent goes on through another
node of the cluster (the nodes its node's `status` listed). An append whose outcome the
client cannot know when its retries end (an attempt went unanswered, or its leader lost
the role with it in flight) fails `outcome_unknown`, never with a plain retryable error
that would invite a blind resend.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Generator

from topics_actors.client import request_shapes as shapes
from topics_actors.client import router_admin
from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.client.leader_map import HOPS_MAX, LeaderMap
from topics_actors.client.retry_budget import (
    RetryBudget, new_session, no_node, outcome_unknown, unavailable,
)
from topics_actors.client.shard_map import FRONT, ShardMap, routing_only
from topics_actors.errors import TopicsError
from topics_actors.limits import CLAIM_WAIT_MS_MAX
from topics_actors.protocol.messages import (
    Ack, Append, Claim, DeleteRecords, Extend, GetTopic, Nack, PutTopic, Scan, Status,
)

ROUTES_MAX = 4_096      # topics whose target a client remembers
LEADER_SILENCE_MS = 500     # silence from a leader's front before its node is asked again
LEADER_CONNECT_MS = 100     # no connection to a leader's front by then: its node is asked
LEADER_PAUSE_S = 0.05       # the pause before asking it (no growing backoff while a failover
                            # is followed: the new leader is known the moment it is elected)
_UNSENT = object()          # an attempt that sent nothing (no shard serving, no connection)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: `key` names the connection (a shard's index, FRONT, or
    another node's front by its endpoint), `endpoint` its address; a transport keeps one
    connection per key and opens it again when the endpoint changes."""
    key: int | str
    endpoint: str
    curve: CurveCredentials | None = None


@dataclasses.dataclass(slots=True)
class Call:
    target: Target
    msg: object
    timeout_ms: int
    connect_ms: int | None = None
    sent: bool = False        # set by the transport once the request left (else: no peer)


@dataclasses.dataclass(slots=True)
class Pause:
    seconds: float


@dataclasses.dataclass(slots=True)
class Fan:
    flows: list


@dataclasses.dataclass(slots=True)
class Refusal:
    pass


@dataclasses.dataclass(slots=True)
class Tried:
    """The outcome of a first attempt a transport made on its own (ClientCore.attempt): the
    reply (None: silence) or the error it got."""
    started_s: float
    reply: dict | None
    error: TopicsError | None = None
    sent: bool = True

    def outcome(self) -> dict | None:
        if self.error is not None:
            raise self.error
        return self.reply if self.reply is not None or self.sent else _UNSENT


@dataclasses.dataclass(slots=True)
class Request:
    """An operation of one request: `msg` to the shard owning `topic`, its reply given to
    `shape` with `shape_args` (None: the reply as it came)."""
    topic: str
    msg: object
    wait_ms: int = 0
    shape: Callable[..., dict] | None = None
    shape_args: tuple = ()


Step = Call | Pause | Fan | Refusal
Flow = Generator[Step, object, object]


class ClientCore:
    def __init__(self, endpoint: str, *, route: bool, node_local: bool,
                 request_timeout_ms: int, retry_deadline_ms: int, connect_timeout_ms: int,
                 curve: CurveCredentials | None):
        """`node_local`: a process of the node (the gateway, the compactor), which reaches
        each shard on its ipc socket while the map names one."""
        self.endpoint = endpoint
        self.route = route
        self.node_local = node_local
        self.request_timeout_ms = request_timeout_ms
        self.retry_deadline_ms = retry_deadline_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.curve = curve
        self.front = Target(FRONT, endpoint, curve)
        self.map: ShardMap | None = None
        self._reached = False          # whether the node ever answered this client
        self._leaders = LeaderMap()
        self._targets: dict[int, Target] = {}       # shard -> its target, this map
        self._routes: dict[str, Target] = {}        # topic -> its target, this map
        self._session = new_session()
        self._appends = itertools.count(1)
        self._fronts: list[tuple[str, str | None]] = []   # the cluster's nodes: front, key

    def session_key(self) -> str:
        """The next key of this client's session (what makes an append's retry safe)."""
        return f"{self._session}:{next(self._appends)}"

    # --- routing and retries ----------------------------------------------------------------

    def status(self) -> Flow:
        """The node's shard map and readiness, from the front; it refreshes the map."""
        first, t0 = not self._reached, time.monotonic()
        reply = yield Call(self.front, Status(), self.request_timeout_ms,
                           self.connect_timeout_ms if first else None)
        if reply is None:
            refusal = yield Refusal()
            if refusal is not None:
                raise refusal
            if first:
                raise no_node(self.endpoint, round((time.monotonic() - t0) * 1000))
            silent = self.front.endpoint
            self._next_front()
            raise unavailable(f"the node at {silent}")
        self._reached = True
        self._note_cluster(reply)
        self.map = ShardMap.from_status(reply)
        self._targets.clear()
        self._routes.clear()
        return reply

    def _note_cluster(self, status: dict) -> None:
        """The other nodes' fronts, from a cluster node's status: where to go on when this
        node goes silent (a process of the node never does: it goes with its node)."""
        nodes = (status.get("cluster") or {}).get("nodes") or {}
        if self.node_local or not nodes:
            return
        self._fronts = sorted((f"tcp://{info.get('advertise', '127.0.0.1')}:"
                               f"{info['zmq_port']}", info.get("curve_public"))
                              for info in nodes.values() if info.get("zmq_port"))

    def _next_front(self) -> None:
        """Our node went silent: ask the next node of the cluster from now on."""
        fronts = [f for f in self._fronts if f[0] != self.front.endpoint]
        if not fronts:
            return
        at = next((i for i, f in enumerate(self._fronts) if f[0] == self.front.endpoint), -1)
        endpoint, key = self._fronts[(at + 1) % len(self._fronts)]
        curve = self.curve
        if curve is not None and key:
            curve = dataclasses.replace(curve, server_public=key.encode("ascii"))
        self.front = Target(FRONT, endpoint, curve)
        self._forget_map()

    def timeout_ms(self, target: Target, wait_ms: int) -> int:
        """How long an attempt waits: on another node's front (a topic's leader), only
        LEADER_SILENCE_MS before the client's own node is asked who leads now."""
        if isinstance(target.key, str):
            return min(self.request_timeout_ms, LEADER_SILENCE_MS) + wait_ms
        return self.request_timeout_ms + wait_ms

    def attempt(self, topic: str, msg, wait_ms: int) -> Call | None:
        """The first attempt of a request whose topic's route is known (the common case),
        which a transport makes without a flow, going on with `request(..., tried=...)`
        only when it fails; None when the route must be found first."""
        target = self._routes.get(topic)
        if target is None:
            return None
        return Call(target, msg, self.timeout_ms(target, wait_ms),
                    LEADER_CONNECT_MS if isinstance(target.key, str) else None)

    def request(self, topic: str | None, msg, shard: int | None = None, wait_ms: int = 0,
                tried: Tried | None = None) -> Flow:
        """`msg` to the shard owning `topic` (or to `shard`), retried within the deadline;
        the raw reply. `tried`: the outcome of the attempt a transport already made."""
        started_s = time.monotonic() if tried is None else tried.started_s
        doubt = [False]                # whether an attempt may have been applied unanswered
        try:
            return (yield from self._retried(topic, msg, shard, wait_ms, tried, started_s,
                                             doubt))
        except TopicsError as error:
            if doubt[0] and type(msg) is Append:
                raise outcome_unknown(msg.idempotency_key, error) from error
            raise

    def _retried(self, topic: str | None, msg, shard: int | None, wait_ms: int,
                 tried: Tried | None, started_s: float, doubt: list[bool]) -> Flow:
        budget, hops = None, 0
        while True:
            cap_s = None
            try:
                if tried is None:
                    reply = yield from self._attempt(topic, msg, shard, wait_ms)
                else:
                    first, tried = tried, None
                    reply = first.outcome()
                if reply is not None and reply is not _UNSENT:
                    return reply
                doubt[0] = doubt[0] or reply is None
                if shard is None and self._leaders.forget(topic):
                    self._routes.pop(topic, None)   # a silent leader: our node knows who
                    hops, cap_s = 0, LEADER_PAUSE_S  # leads now, or soon will
                else:
                    self._forget_map()     # silence: look the shard up again
            except TopicsError as error:
                if not self._reached:
                    raise
                doubt[0] = doubt[0] or bool((error.detail or {}).get("in_doubt"))
                if shard is None and self._leaders.learn(topic, error) and hops < HOPS_MAX:
                    hops += 1
                    self._routes.pop(topic, None)
                    continue               # to the node that leads the topic, at once
                budget = budget or self._budget(topic, shard, started_s)
                if budget.absorb(error):
                    self._forget_map()
            budget = budget or self._budget(topic, shard, started_s)
            yield Pause(budget.next_delay_s(cap_s))

    def _attempt(self, topic: str | None, msg, shard: int | None, wait_ms: int) -> Flow:
        """One attempt: the reply, None for silence, _UNSENT for a shard not serving."""
        target = self._routes.get(topic) if shard is None else None
        if target is None:
            target = yield from self._route(topic, shard)
        if target is None:
            return _UNSENT
        call = Call(target, msg, self.timeout_ms(target, wait_ms),
                    LEADER_CONNECT_MS if isinstance(target.key, str) else None)
        reply = yield call
        return _UNSENT if reply is None and not call.sent else reply

    def _budget(self, topic: str | None, shard: int | None, started_s: float) -> RetryBudget:
        what = f"shard {shard}" if shard is not None else f"the shard owning {topic!r}"
        return RetryBudget(self.retry_deadline_ms, what, started_s)

    def _route(self, topic: str | None, shard: int | None) -> Flow:
        """The target of the shard owning `topic` (or of `shard`), or of the node that
        leads a replicated topic, remembered per topic until the shard map changes; None
        while that shard is not serving."""
        if self.map is None:
            yield from self.status()
        leader = self._leaders.front(topic) if shard is None else None
        if leader is not None:
            target = Target(leader, leader, self._leaders.curve(leader, self.curve))
        else:
            target = self.shard_target(self.map.target(self.route, topic, shard))
        if target is not None and shard is None and topic is not None:
            if len(self._routes) >= ROUTES_MAX:
                self._routes.clear()
            self._routes[topic] = target
        return target

    def shard_target(self, shard: int | None) -> Target | None:
        """The target of `shard` (FRONT: the front; None: none) in the current map."""
        if shard is None:
            return None
        if shard == FRONT:
            return self.front
        target = self._targets.get(shard)
        if target is None:
            target = self._targets[shard] = Target(
                shard, self.map.endpoint(shard, self.node_local), self.curve)
        return target

    def _forget_map(self) -> None:
        self.map = None
        self._targets.clear()
        self._routes.clear()

    def all_shards(self, msg) -> Flow:
        """`msg` to every shard (or to the front, which asks them all); replies in order."""
        if self.map is None:
            yield from self.status()
        return (yield Fan([self.request(None, msg, shard)
                           for shard in self.map.fan_out(self.route)]))

    def drive(self, steps: router_admin.Steps) -> Flow:
        """Run a router_admin operation: send what it yields, give it the replies."""
        reply, error = None, None
        while not isinstance(step := router_admin.advance(steps, reply, error),
                             router_admin.Done):
            reply, error = None, None
            try:
                if isinstance(step, router_admin.ToAll):
                    reply = yield from self.all_shards(step.msg)
                else:
                    reply = yield from self.request(step.topic, step.msg)
            except TopicsError as failure:
                error = failure
        return step.value

    # --- the operations (the clients' public methods run these) -----------------------------
    # One request each: a Request (the facade sends it through `request`, then shapes the
    # reply); several: a flow.

    def call_shard(self, shard: int, msg) -> Flow:
        routing_only(self.route, "call_shard")
        if self.map is None:
            yield from self.status()
        return (yield from self.request(None, msg, shard))

    def node_request(self, msg) -> Flow:
        """`msg` answered by the node's front itself (a cluster move), not retried: the
        caller sees why it failed."""
        reply = yield Call(self.front, msg, self.request_timeout_ms)
        if reply is None:
            raise unavailable(f"the node at {self.front.endpoint}")
        return reply

    def shard_statuses(self) -> Flow:
        routing_only(self.route, "shard_statuses")
        return (yield from self.all_shards(Status()))

    def put_topic(self, name: str, config: dict) -> Request:
        return Request(name, PutTopic(name, config))

    def get_topic(self, name: str, touch: bool) -> Request:
        return Request(name, GetTopic(name, touch))

    def delete_topic(self, name: str, if_empty: bool) -> Flow:
        return self.drive(router_admin.delete_topic(name, if_empty))

    def list_topics(self, prefix: str, page_size: int | None, cursor: str | None,
                    touch: bool) -> Flow:
        msg, size = shapes.list_request(prefix, page_size, cursor, touch)
        return shapes.merge_pages((yield from self.all_shards(msg)), size)

    def delete_records(self, name: str, before_seq: int | None, match) -> Request:
        return Request(name, DeleteRecords(name, before_seq, match))

    def append(self, name: str, records: list, options: dict) -> Request:
        msg = shapes.append_request(name, records, self.session_key(), **options)
        return Request(name, msg, 0, shapes.with_seqs, (options,))

    def append_encoded(self, name: str, records: list, idempotency_key: str,
                       create: bool | None, config: dict | None) -> Request:
        return Request(name, Append(name, records, None, idempotency_key, create, config,
                                    False))

    def scan(self, name: str, after_seq: int, until_seq: int, limit: int,
             max_batch_bytes: int) -> Request:
        return Request(name, Scan(name, after_seq, until_seq, limit, max_batch_bytes))

    def diff(self, name: str, from_seq: int, limit: int, node, include_tags: bool,
             include_meta: bool, wait_ms: int, max_batch_bytes: int) -> Request:
        msg = shapes.diff_request(name, from_seq, limit, node, include_tags, include_meta,
                                  wait_ms, max_batch_bytes)
        return Request(name, msg, wait_ms, shapes.shape_diff, (include_meta,))

    # A retried claim (its reply lost) may lease more jobs; the first ones come back when
    # their leases expire. Ack, nack and extend repeat harmlessly (the repeat is skipped).

    def claim(self, name: str, node: str, max_jobs: int, lease_ms: int | None) -> Request:
        return Request(name, Claim(name, node, max_jobs, lease_ms), CLAIM_WAIT_MS_MAX,
                       shapes.shape_claim)

    def ack(self, name: str, node: str, seqs: list[int], lease_ids) -> Request:
        return Request(name, Ack(name, node, seqs, lease_ids))

    def nack(self, name: str, node: str, seqs: list[int], delay_ms: int,
             lease_ids) -> Request:
        return Request(name, Nack(name, node, seqs, delay_ms, lease_ids))

    def extend(self, name: str, node: str, seqs: list[int], lease_ms: int,
               lease_ids) -> Request:
        return Request(name, Extend(name, node, seqs, lease_ms, lease_ids))

    def put_router(self, name: str, source: str, dest: str, options: dict) -> Flow:
        return self.drive(router_admin.put_router(
            name, {"source": source, "dest": dest, **options}))

    def get_router(self, name: str) -> Flow:
        return self.drive(router_admin.get_router(name))

    def list_routers(self, prefix: str, source: str | None, dest: str | None,
                     page_size: int | None, cursor: str | None) -> Flow:
        return self.drive(router_admin.list_routers(prefix, source, dest, page_size, cursor))

    def delete_router(self, name: str) -> Flow:
        return self.drive(router_admin.delete_router(name))
