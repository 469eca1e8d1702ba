"""The blocking client: one request in flight, routed straight to the owning shard, or,
with route=False, sent to the front, which forwards it (one address is all it needs).

Not thread-safe (ZeroMQ sockets are not): use one Client per thread. The exception is
`append` on a client with linger (`linger_ms` > 0 or "auto"): any number of threads may call
it at once, since a sender thread of its own, with its own sockets, sends every append
(linger_sender.py); the other methods still want one thread at a time.

Retries: `not_ready` and `throttled` replies, and silence (a shard that died), are retried
until `retry_deadline_ms`, refreshing the shard map so a restarted shard is found again.
Every append carries a key (the caller's idempotency_key, or a session key), so a retry of a
write whose ack was lost returns the original seqs instead of appending twice.
"""

from __future__ import annotations

import itertools
import math
import time

import zmq

from topics_actors.client.leader_map import HOPS_MAX, LeaderMap
from topics_actors.client import request_shapes as shapes
from topics_actors.client import router_admin
from topics_actors.client.append_linger import (
    BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, WAITING_MAX_DEFAULT,
    ClientStatistics, LingerOptions,
)
from topics_actors.client.blocking_watch import blocking_watch
from topics_actors.client.curve_credentials import (
    CurveCredentials, HandshakeWatch, wait_slices,
)
from topics_actors.client.front_discovery import front_endpoint
from topics_actors.client.linger_sender import LingerSender, closed_error
from topics_actors.client.retry_budget import (
    CONNECT_TIMEOUT_MS, RetryBudget, new_session, no_node, unavailable,
)
from topics_actors.client.shard_map import DEFAULT_ENDPOINT, FRONT, ShardMap, routing_only
from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply, encode
from topics_actors.protocol.messages import (
    Append, DeleteRecords, DeleteTopic, GetTopic, PutTopic, Scan, Status,
)
from topics_actors.limits import CLAIM_WAIT_MS_MAX
from topics_actors.protocol.messages import Ack, Claim, Extend, Nack

ROUTES_MAX = 4_096      # topics whose shard socket a client remembers


class Client:
    """`endpoint`: the node's front (tcp://host:port), or its HTTP URL (http://host:port),
    whose /v0/health names the front (front_discovery; asked once, here). `route`: send
    each request to the shard owning its topic (fastest; the client must reach every
    shard's endpoint), or, when False, to the front, which forwards it. `curve_server_key`
    (Z85, or a file holding it), `curve_public_key`, `curve_secret_key`: for a node that
    requires CURVE client keys (curve_credentials). `linger_ms` > 0: appends from
    concurrent threads to one topic wait up to that long to be sent together as one request;
    "auto": they wait only while a request is in flight (docs/CLIENT.md "Linger";
    `linger_batch_records_max`, `linger_batch_bytes_max` bound a batch,
    `linger_waiting_max` the appends waiting)."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *, request_timeout_ms: int = 5_000,
                 retry_deadline_ms: int = 30_000, connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
                 ctx: zmq.Context | None = None, route: bool = True,
                 node_local: bool = False, curve_server_key=None, curve_public_key=None,
                 curve_secret_key=None, linger_ms: float | str = 0,
                 linger_batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT,
                 linger_batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
                 linger_waiting_max: int = WAITING_MAX_DEFAULT):
        linger = LingerOptions.of(linger_ms, linger_batch_records_max, linger_batch_bytes_max,
                                  linger_waiting_max)
        self.endpoint = front_endpoint(endpoint, request_timeout_ms)
        self.route = route
        self.node_local = node_local       # a process of the node: shards' ipc sockets
        self.request_timeout_ms = request_timeout_ms
        self.retry_deadline_ms = retry_deadline_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._reached = False          # whether the node ever answered this client
        self._ctx = ctx or zmq.Context.instance()
        self._curve_keys = {"curve_server_key": curve_server_key,
                            "curve_public_key": curve_public_key,
                            "curve_secret_key": curve_secret_key}
        self._curve = CurveCredentials.of(curve_server_key, curve_public_key, curve_secret_key)
        self._front = self._dealer(self.endpoint, connect=False)
        self._watch = HandshakeWatch(self._front)   # before the connect: a handshake that
        self._front.connect(self.endpoint)           # fails at once is not missed
        self._shards: dict[int, tuple[str, zmq.Socket]] = {}
        self._leader_socks: dict[str, zmq.Socket] = {}    # other nodes' fronts, by endpoint
        self._leaders = LeaderMap()
        self._map: ShardMap | None = None
        self._corr = itertools.count(1)
        self._session = new_session()
        self._appends = itertools.count(1)
        self._routes: dict[str, zmq.Socket] = {}   # topic -> its shard's socket, this map
        self._closed = False
        self._linger = None if linger is None else LingerSender(self._sibling(), linger)

    def _sibling(self) -> "Client":
        """A Client like this one without linger: the linger sender thread's own."""
        return Client(self.endpoint, request_timeout_ms=self.request_timeout_ms,
                      retry_deadline_ms=self.retry_deadline_ms,
                      connect_timeout_ms=self.connect_timeout_ms, ctx=self._ctx,
                      route=self.route, node_local=self.node_local, **self._curve_keys)

    def _session_key(self) -> str:
        """The next key of this client's session (what makes an append's retry safe)."""
        return f"{self._session}:{next(self._appends)}"

    def _dealer(self, endpoint: str, curve: CurveCredentials | None = None,
                connect: bool = True) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)   # never queue for a peer that is not connected
        curve = curve or self._curve
        if curve is not None:
            curve.apply(sock, endpoint)
        if connect:
            sock.connect(endpoint)
        return sock

    def close(self) -> None:
        """Close the sockets; with linger, first send the appends that wait (and answer
        them) and stop the sender thread."""
        self._closed = True
        if self._linger is not None:
            self._linger.close()
        self._routes.clear()
        for _, sock in self._shards.values():
            sock.close(0)
        self._shards.clear()
        for sock in self._leader_socks.values():
            sock.close(0)
        self._leader_socks.clear()
        self._watch.close()
        self._front.close(0)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _call(self, sock: zmq.Socket, msg, timeout_ms: int,
              connect_ms: int | None = None) -> dict | None:
        """One attempt: the reply, or None if nothing came back in time (or no connection
        came up within `connect_ms`)."""
        corr = next(self._corr)
        deadline = time.monotonic() + timeout_ms / 1000
        raw = encode(msg, corr)
        try:
            sock.send(raw, zmq.NOBLOCK)
        except zmq.Again:   # with IMMEDIATE, writable means connected: wait for that
            if not self._connected(sock, min(timeout_ms, connect_ms or timeout_ms)):
                return None
            try:
                sock.send(raw, zmq.NOBLOCK)
            except zmq.Again:
                return None
        while (left_ms := (deadline - time.monotonic()) * 1000) > 0:
            # zmq_poll itself: Socket.poll builds a Poller on every call (6.3 against 2.6 us)
            if not zmq.zmq_poll([(sock, zmq.POLLIN)], math.ceil(left_ms)):
                return None
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:   # readable, then its peer dropped out (killed): poll again
                continue
            for raw in frames:
                try:
                    got, body = decode_reply(raw)
                except TopicsError as error:
                    if getattr(error, "corr", None) == corr:
                        raise
                    continue
                if got == corr:
                    return body
        return None

    def _connected(self, sock: zmq.Socket, timeout_ms: int) -> bool:
        """Wait until `sock` can send (with IMMEDIATE: is connected); on the front, give up
        as soon as a handshake fails, which waiting would not mend."""
        if sock is not self._front:
            return bool(sock.poll(timeout_ms, zmq.POLLOUT))
        for slice_ms in wait_slices(timeout_ms):
            if sock.poll(slice_ms, zmq.POLLOUT):
                return True
            if self._watch.failed():
                return False
        return False

    def status(self) -> dict:
        """The node's shard map and readiness, from the front endpoint."""
        first, t0 = not self._reached, time.monotonic()
        reply = self._call(self._front, Status(), self.request_timeout_ms,
                           self.connect_timeout_ms if first else None)
        if reply is None:
            refusal = self._watch.refusal(self.endpoint)
            if refusal is not None:
                raise refusal
            if first:
                raise no_node(self.endpoint, round((time.monotonic() - t0) * 1000))
            raise unavailable(f"the node at {self.endpoint}")
        self._reached = True
        self._map = ShardMap.from_status(reply)
        self._routes.clear()
        return reply

    def _shard_socket(self, shard: int | None) -> zmq.Socket | None:
        if shard is None:
            return None
        if shard == FRONT:
            return self._front
        endpoint = self._map.endpoint(shard, self.node_local)
        current = self._shards.get(shard)
        if current is None or current[0] != endpoint:
            if current is not None:
                current[1].close(0)
            current = self._shards[shard] = (endpoint, self._dealer(endpoint))
        return current[1]

    def _request(self, topic: str | None, msg, shard: int | None = None,
                 wait_ms: int = 0) -> dict:
        started_s, budget, hops = time.monotonic(), None, 0
        while True:
            try:
                sock = self._routes.get(topic) if shard is None else None
                if sock is None:
                    sock = self._route(topic, shard)
                timeout_ms = self.request_timeout_ms + wait_ms
                reply = None if sock is None else self._call(sock, msg, timeout_ms)
                if reply is not None:
                    return reply
                self._forget_map()         # silence: look the shard up again
                self._leaders.forget(topic)
            except TopicsError as error:
                if not self._reached:
                    raise
                if shard is None and self._leaders.learn(topic, error) and hops < HOPS_MAX:
                    hops += 1
                    self._routes.pop(topic, None)
                    continue               # to the node that leads the topic, at once
                budget = budget or self._budget(topic, shard, started_s)
                if budget.absorb(error):
                    self._forget_map()
            budget = budget or self._budget(topic, shard, started_s)
            time.sleep(budget.next_delay_s())

    def _budget(self, topic: str | None, shard: int | None, started_s: float) -> RetryBudget:
        what = f"shard {shard}" if shard is not None else f"the shard owning {topic!r}"
        return RetryBudget(self.retry_deadline_ms, what, started_s)

    def _route(self, topic: str | None, shard: int | None) -> zmq.Socket | None:
        """The socket of the shard owning `topic` (or of `shard`), or of the node that
        leads a replicated topic, remembered per topic until the shard map changes; None
        while that shard is not serving."""
        if self._map is None:
            self.status()
        leader = self._leaders.front(topic) if shard is None else None
        sock = (self._leader_socket(leader) if leader else
                self._shard_socket(self._map.target(self.route, topic, shard)))
        if sock is not None and shard is None and topic is not None:
            if len(self._routes) >= ROUTES_MAX:
                self._routes.clear()
            self._routes[topic] = sock
        return sock

    def _leader_socket(self, endpoint: str) -> zmq.Socket:
        sock = self._leader_socks.get(endpoint)
        if sock is None:
            sock = self._leader_socks[endpoint] = self._dealer(
                endpoint, self._leaders.curve(endpoint, self._curve))
        return sock

    def _forget_map(self) -> None:
        self._map = None
        self._routes.clear()

    def _all_shards(self, msg) -> list[dict]:
        if self._map is None:
            self.status()
        return [self._request(None, msg, shard) for shard in self._map.fan_out(self.route)]


    # --- the API ----------------------------------------------------------------------------

    def call_shard(self, shard: int, msg) -> dict:
        """Send any request kind to one shard (node processes: checkpoints, absorbed)."""
        routing_only(self.route, "call_shard")
        if self._map is None:
            self.status()
        return self._request(None, msg, shard)

    def shard_statuses(self) -> list[dict]:
        """Each shard's own status: readiness, topic count and `statistics` (batches, syncs,
        records, requests, throttled, failed_batches)."""
        routing_only(self.route, "shard_statuses")
        return self._all_shards(Status())

    def put_topic(self, name: str, **config) -> dict:
        return self._request(name, PutTopic(name, config))

    def get_topic(self, name: str, touch: bool = True) -> dict:
        return self._request(name, GetTopic(name, touch))

    def delete_topic(self, name: str, if_empty: bool = False) -> dict:
        """Delete a topic; the routers with it as source or dest go with it."""
        return self._drive(router_admin.delete_topic(name, if_empty))

    def list_topics(self, prefix: str = "", page_size: int | None = None,
                    cursor: str | None = None, touch: bool = False) -> dict:
        msg, size = shapes.list_request(prefix, page_size, cursor, touch)
        return shapes.merge_pages(self._all_shards(msg), size)

    def delete_records(self, name: str, before_seq: int | None = None, match=None) -> dict:
        """Permanently delete records below before_seq and/or whose tag matches `match`
        (["tag", "Eq", v], ["tag", "Glob", "prefix*"] or a tag string)."""
        return self._request(name, DeleteRecords(name, before_seq, match))

    def append(self, name: str, records: list[dict], **options) -> dict:
        """Append records ({"data", "tag"?, "node"?, "meta"?}) as one all-or-nothing batch.
        Options: node, idempotency_key, create, config, return_seqs. With linger,
        concurrent appends to `name` may travel in one request (docs/CLIENT.md "Linger")."""
        if self._linger is not None:
            if self._closed:
                raise closed_error()
            return self._linger.append(name, records, options)
        reply = self._request(name, shapes.append_request(name, records, self._session_key(),
                                                          **options))
        return shapes.with_seqs(reply, options)

    def statistics(self) -> ClientStatistics:
        """The client's linger counters (zero without linger)."""
        return ClientStatistics() if self._linger is None else self._linger.statistics()

    def append_encoded(self, name: str, records: list[list], *, idempotency_key: str,
                       create: bool | None = None, config: dict | None = None) -> dict:
        """Append records already in wire form ([data JSON bytes, tag, node, meta]), e.g.
        JSON text taken as it is from a DataFrame column; seqs are not returned."""
        return self._request(name, Append(name, records, None, idempotency_key, create,
                                          config, False))

    def scan(self, name: str, after_seq: int = 0, until_seq: int = 0, limit: int = 0,
             max_batch_bytes: int = 0) -> dict:
        """The bulk range read in columns (docs/PROTOCOL.md `scan`), reply as it came."""
        return self._request(name, Scan(name, after_seq, until_seq, limit, max_batch_bytes))

    def diff(self, name: str, from_seq: int = 0, limit: int = 0, *, node=None,
             include_tags: bool = False, include_meta: bool = True, wait_ms: int = 0,
             max_batch_bytes: int = 0) -> dict:
        msg = shapes.diff_request(name, from_seq, limit, node, include_tags, include_meta,
                                  wait_ms, max_batch_bytes)
        return shapes.shape_diff(self._request(name, msg, wait_ms=wait_ms), include_meta)

    def watch(self, topics, **options):
        """The watch events of AsyncClient.watch as a blocking iterator (same arguments).
        It runs an AsyncClient on a private event loop, so it must not be called from a
        running event loop (use AsyncClient.watch there); close it (or leave the loop) to
        stop."""
        return blocking_watch(self.endpoint, {"request_timeout_ms": self.request_timeout_ms,
                                              "retry_deadline_ms": self.retry_deadline_ms,
                                              "route": self.route, **self._curve_keys},
                              topics, options)

    # --- queues (spec/api.md 8) -----------------------------------------------------------
    # A retried claim (its reply lost) may lease more jobs; the first ones come back when
    # their leases expire. Ack, nack and extend repeat harmlessly (the repeat is skipped).

    def claim(self, name: str, node: str, max: int = 1,
              lease_ms: int | None = None) -> dict:
        """Lease up to `max` jobs of queue `name` to `node`; jobs as API dicts."""
        msg = Claim(name, node, max, lease_ms)
        return shapes.shape_claim(self._request(name, msg, wait_ms=CLAIM_WAIT_MS_MAX))

    def ack(self, name: str, node: str, seqs: list[int],
            lease_ids: list[str] | None = None) -> dict:
        """Delete the jobs `node` holds (fenced by `lease_ids` when given)."""
        return self._request(name, Ack(name, node, seqs, lease_ids))

    def nack(self, name: str, node: str, seqs: list[int], delay_ms: int = 0,
             lease_ids: list[str] | None = None) -> dict:
        """Give held jobs back: claimable now, or after delay_ms."""
        return self._request(name, Nack(name, node, seqs, delay_ms, lease_ids))

    def extend(self, name: str, node: str, seqs: list[int], lease_ms: int,
               lease_ids: list[str] | None = None) -> dict:
        """Set the deadline of held jobs to now + lease_ms."""
        return self._request(name, Extend(name, node, seqs, lease_ms, lease_ids))

    # --- routers (spec/api.md 6; the rules: client/router_admin.py) ------------------------

    def _drive(self, steps: router_admin.Steps) -> dict:
        """Run a router_admin operation: send what it yields, give it the replies."""
        reply, error = None, None
        while not isinstance(step := router_admin.advance(steps, reply, error),
                             router_admin.Done):
            reply, error = None, None
            try:
                if isinstance(step, router_admin.ToAll):
                    reply = self._all_shards(step.msg)
                else:
                    reply = self._request(step.topic, step.msg)
            except TopicsError as failure:
                error = failure
        return step.value

    def put_router(self, name: str, source: str, dest: str, **options) -> dict:
        """Create a router (or update its knobs). Options: preserve_node, preserve_tag,
        create_dest, filter, allow_cycle, guarantee ("at_least_once" | "exactly_once")."""
        return self._drive(router_admin.put_router(
            name, {"source": source, "dest": dest, **options}))

    def get_router(self, name: str) -> dict:
        return self._drive(router_admin.get_router(name))

    def list_routers(self, prefix: str = "", source: str | None = None,
                     dest: str | None = None, page_size: int | None = None,
                     cursor: str | None = None) -> dict:
        return self._drive(router_admin.list_routers(prefix, source, dest, page_size, cursor))

    def delete_router(self, name: str) -> dict:
        """Delete a router; the records it copied stay in its dest."""
        return self._drive(router_admin.delete_router(name))
