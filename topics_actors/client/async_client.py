"""The asyncio client: many requests in flight per shard, matched by correlation id.

Same API, retries and idempotency as the blocking Client; every method is a coroutine.
At most `max_in_flight` requests per shard are outstanding (a bounded window, which also
keeps a session's retries inside the shard's dedupe ring). With `linger_ms` > 0 or "auto",
concurrent appends to one topic travel together in one request (async_linger.py).
"""

from __future__ import annotations

import asyncio
import itertools
import time

import zmq

from topics_actors.client import request_shapes as shapes
from topics_actors.client import router_admin
from topics_actors.client.append_linger import (
    BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, IN_FLIGHT_MAX_DEFAULT,
    WAITING_MAX_DEFAULT, ClientStatistics, LingerOptions,
)
from topics_actors.client.async_connection import AsyncConnection
from topics_actors.client.async_linger import AsyncLinger
from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.client.front_discovery import front_endpoint
from topics_actors.client.leader_map import HOPS_MAX, LeaderMap
from topics_actors.client.retry_budget import (
    CONNECT_TIMEOUT_MS, RetryBudget, new_session, no_node, unavailable,
)
from topics_actors.client.shard_map import DEFAULT_ENDPOINT, FRONT, ShardMap, routing_only
from topics_actors.client.topic_watch import WATCH_WAIT_MS_DEFAULT, watch_events
from topics_actors.errors import TopicsError
from topics_actors.protocol import encode
from topics_actors.protocol.messages import (
    DeleteRecords, DeleteTopic, GetTopic, PutTopic, Status,
)
from topics_actors.limits import CLAIM_WAIT_MS_MAX
from topics_actors.protocol.messages import Ack, Claim, Extend, Nack

ROUTES_MAX = 4_096      # topics whose shard connection a client remembers


class AsyncClient:
    """`endpoint`, `route` and the linger options as for Client; an HTTP URL is resolved
    here, with a blocking request of at most `request_timeout_ms` (build the client before
    the loop is busy). `linger_in_flight_max` (linger_ms "auto" only): requests of one topic
    in flight before its appends gather for the next one (docs/CLIENT.md "Linger")."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *, request_timeout_ms: int = 5_000,
                 retry_deadline_ms: int = 30_000, max_in_flight: int = 256,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
                 ctx: zmq.Context | None = None, route: bool = True,
                 curve_server_key=None, curve_public_key=None, curve_secret_key=None,
                 linger_ms: float | str = 0,
                 linger_batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT,
                 linger_batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
                 linger_waiting_max: int = WAITING_MAX_DEFAULT,
                 linger_in_flight_max: int = IN_FLIGHT_MAX_DEFAULT):
        linger = LingerOptions.of(linger_ms, linger_batch_records_max, linger_batch_bytes_max,
                                  linger_waiting_max, linger_in_flight_max)
        self.endpoint = front_endpoint(endpoint, request_timeout_ms)
        self.route = route
        self._curve = CurveCredentials.of(curve_server_key, curve_public_key, curve_secret_key)
        self.request_timeout_ms = request_timeout_ms
        self.retry_deadline_ms = retry_deadline_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._reached = False          # whether the node ever answered this client
        self.max_in_flight = max_in_flight
        self._ctx = ctx or zmq.Context.instance()
        self._conns: dict[int | str, AsyncConnection] = {}   # shards; other nodes' fronts
        self._leaders = LeaderMap()
        self._map: ShardMap | None = None
        self._corr = itertools.count(1)
        self._session = new_session()
        self._appends = itertools.count(1)
        self._routes: dict[str, AsyncConnection] = {}   # topic -> its shard's connection
        self._linger = None if linger is None else AsyncLinger(self, linger)

    def _session_key(self) -> str:
        """The next key of this client's session (what makes an append's retry safe)."""
        return f"{self._session}:{next(self._appends)}"

    def statistics(self) -> ClientStatistics:
        """The client's linger counters (zero without linger)."""
        return ClientStatistics() if self._linger is None else self._linger.statistics()

    async def close(self) -> None:
        """Close the connections; with linger, first send the waiting appends and wait for
        their answers."""
        if self._linger is not None:
            await self._linger.close()
        self._routes.clear()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def _conn(self, key: int | str, endpoint: str,
              curve: CurveCredentials | None = None) -> AsyncConnection:
        conn = self._conns.get(key)
        if conn is None or conn.endpoint != endpoint:
            if conn is not None:
                conn.close()
            conn = self._conns[key] = AsyncConnection(self._ctx, endpoint, self.max_in_flight,
                                                      curve or self._curve, watch=key == FRONT)
        return conn

    async def _call(self, conn: AsyncConnection, msg, wait_ms: int = 0,
                    connect_ms: int | None = None) -> dict | None:
        """One attempt: the reply, or None if nothing came back in time (or no connection
        came up within `connect_ms`)."""
        async with conn.window:
            corr = next(self._corr)
            future = conn.expect(corr, (self.request_timeout_ms + wait_ms) / 1000)
            try:
                raw = encode(msg, corr)
                if not conn.send(raw, corr):   # not connected (yet): wait, within limits
                    wait_ms = min(self.request_timeout_ms, connect_ms or self.request_timeout_ms)
                    if not await conn.send_when_connected(raw, corr, wait_ms):
                        return None
                return await future
            finally:
                conn.forget(corr)

    async def status(self) -> dict:
        first, t0 = not self._reached, time.monotonic()
        front = self._conn(FRONT, self.endpoint)
        reply = await self._call(front, Status(),
                                 connect_ms=self.connect_timeout_ms if first else None)
        if reply is None:
            refusal = front.watch.refusal(self.endpoint)
            if refusal is not None:
                raise refusal
            if first:
                raise no_node(self.endpoint, round((time.monotonic() - t0) * 1000))
            raise unavailable(f"the node at {self.endpoint}")
        self._reached = True
        self._map = ShardMap.from_status(reply)
        self._routes.clear()
        return reply

    async def _request(self, topic: str | None, msg, shard: int | None = None,
                       wait_ms: int = 0) -> dict:
        started_s, budget, hops = time.monotonic(), None, 0
        while True:
            try:
                conn = self._routes.get(topic) if shard is None else None
                if conn is None:
                    conn = await self._route(topic, shard)
                reply = None if conn is None else await self._call(conn, msg, wait_ms)
                if reply is not None:
                    return reply
                self._forget_map()
                self._leaders.forget(topic)
            except TopicsError as error:
                if not self._reached:
                    raise
                if shard is None and self._leaders.learn(topic, error) and hops < HOPS_MAX:
                    hops += 1
                    self._routes.pop(topic, None)
                    continue               # to the node that leads the topic, at once
                budget = budget or RetryBudget(self.retry_deadline_ms,
                                               f"the shard owning {topic!r}", started_s)
                if budget.absorb(error):
                    self._forget_map()
            budget = budget or RetryBudget(self.retry_deadline_ms,
                                           f"the shard owning {topic!r}", started_s)
            await asyncio.sleep(budget.next_delay_s())

    async def _route(self, topic: str | None,
                     shard: int | None) -> AsyncConnection | None:
        """The connection to the shard owning `topic` (or to `shard`), remembered per topic
        until the shard map changes; None while that shard is not serving."""
        if self._map is None:
            await self.status()
        leader = self._leaders.front(topic) if shard is None else None
        target = self._map.target(self.route, topic, shard)
        if leader is not None:
            conn = self._conn(leader, leader,      # the node leading a replicated topic
                              self._leaders.curve(leader, self._curve))
        elif target is None:
            return None
        else:
            conn = self._conn(target, self._endpoint(target))
        if shard is None and topic is not None:
            if len(self._routes) >= ROUTES_MAX:
                self._routes.clear()
            self._routes[topic] = conn
        return conn

    def _forget_map(self) -> None:
        self._map = None
        self._routes.clear()

    def _endpoint(self, shard: int) -> str:
        return self.endpoint if shard == FRONT else self._map.endpoints[shard]

    async def request(self, topic: str | None, msg, wait_ms: int = 0) -> dict:
        """Send any request kind to the shard owning `topic`; the raw reply (the gateway
        builds its own messages and renders replies itself)."""
        return await self._request(topic, msg, wait_ms=wait_ms)

    async def shard_statuses(self) -> list[dict]:
        routing_only(self.route, "shard_statuses")
        return await self._all_shards(Status())

    async def put_topic(self, name: str, **config) -> dict:
        return await self._request(name, PutTopic(name, config))

    async def get_topic(self, name: str, touch: bool = True) -> dict:
        return await self._request(name, GetTopic(name, touch))

    async def delete_topic(self, name: str, if_empty: bool = False) -> dict:
        """Delete a topic; the routers with it as source or dest go with it."""
        return await self.drive(router_admin.delete_topic(name, if_empty))

    # --- routers (spec/api.md 6; the rules: client/router_admin.py) ------------------------

    async def drive(self, steps: router_admin.Steps) -> dict:
        """Run a router_admin operation: send what it yields, give it the replies."""
        reply, error = None, None
        while not isinstance(step := router_admin.advance(steps, reply, error),
                             router_admin.Done):
            reply, error = None, None
            try:
                if isinstance(step, router_admin.ToAll):
                    reply = await self._all_shards(step.msg)
                else:
                    reply = await self._request(step.topic, step.msg)
            except TopicsError as failure:
                error = failure
        return step.value

    async def _all_shards(self, msg) -> list[dict]:
        if self._map is None:
            await self.status()
        return list(await asyncio.gather(*(self._request(None, msg, shard)
                                           for shard in self._map.fan_out(self.route))))

    async def put_router(self, name: str, source: str, dest: str, **options) -> dict:
        """Create a router (or update its knobs). Options: preserve_node, preserve_tag,
        create_dest, filter, allow_cycle, guarantee ("at_least_once" | "exactly_once")."""
        return await self.drive(router_admin.put_router(
            name, {"source": source, "dest": dest, **options}))

    async def get_router(self, name: str) -> dict:
        return await self.drive(router_admin.get_router(name))

    async def list_routers(self, prefix: str = "", source: str | None = None,
                           dest: str | None = None, page_size: int | None = None,
                           cursor: str | None = None) -> dict:
        return await self.drive(router_admin.list_routers(prefix, source, dest, page_size,
                                                          cursor))

    async def delete_router(self, name: str) -> dict:
        """Delete a router; the records it copied stay in its dest."""
        return await self.drive(router_admin.delete_router(name))

    async def delete_records(self, name: str, before_seq: int | None = None,
                             match=None) -> dict:
        return await self._request(name, DeleteRecords(name, before_seq, match))

    async def list_topics(self, prefix: str = "", page_size: int | None = None,
                          cursor: str | None = None, touch: bool = False) -> dict:
        msg, size = shapes.list_request(prefix, page_size, cursor, touch)
        if self._map is None:
            await self.status()
        pages = await asyncio.gather(*(self._request(None, msg, shard)
                                       for shard in self._map.fan_out(self.route)))
        return shapes.merge_pages(list(pages), size)

    async def append(self, name: str, records: list[dict], **options) -> dict:
        if self._linger is not None:
            return await self._linger.append(name, records, options)
        reply = await self._request(name, shapes.append_request(name, records,
                                                                self._session_key(), **options))
        return shapes.with_seqs(reply, options)

    async def diff(self, name: str, from_seq: int = 0, limit: int = 0, *, node=None,
                   include_tags: bool = False, include_meta: bool = True, wait_ms: int = 0,
                   max_batch_bytes: int = 0) -> dict:
        msg = shapes.diff_request(name, from_seq, limit, node, include_tags, include_meta,
                                  wait_ms, max_batch_bytes)
        reply = await self._request(name, msg, wait_ms=wait_ms)
        return shapes.shape_diff(reply, include_meta)

    def watch(self, topics, *, cursor=None, node=None, limit: int = 0,
              include_tags: bool = False, include_meta: bool = True, max_batch_bytes: int = 0,
              wait_ms: int = WATCH_WAIT_MS_DEFAULT):
        """An async iterator of watch events (spec/api.md 7.2) for `topics` (names, or a map
        name -> from_seq): dicts with `event` (record, tombstone, caught-up,
        topic-deleted), `id` (the composite cursor: pass it as `cursor` to resume after
        that event) and the event's fields. Ends when every topic is deleted."""
        return watch_events(self, topics, cursor=cursor, node=node, limit=limit,
                            include_tags=include_tags, include_meta=include_meta,
                            max_batch_bytes=max_batch_bytes, wait_ms=wait_ms)


    # --- queues (spec/api.md 8) -----------------------------------------------------------
    # A retried claim (its reply lost) may lease more jobs; the first ones come back when
    # their leases expire. Ack, nack and extend repeat harmlessly (the repeat is skipped).

    async def claim(self, name: str, node: str, max: int = 1,
                    lease_ms: int | None = None) -> dict:
        """Lease up to `max` jobs of queue `name` to `node`; jobs as API dicts."""
        msg = Claim(name, node, max, lease_ms)
        return shapes.shape_claim(await self._request(name, msg, wait_ms=CLAIM_WAIT_MS_MAX))

    async def ack(self, name: str, node: str, seqs: list[int],
                  lease_ids: list[str] | None = None) -> dict:
        """Delete the jobs `node` holds (fenced by `lease_ids` when given)."""
        return await self._request(name, Ack(name, node, seqs, lease_ids))

    async def nack(self, name: str, node: str, seqs: list[int], delay_ms: int = 0,
                   lease_ids: list[str] | None = None) -> dict:
        """Give held jobs back: claimable now, or after delay_ms."""
        return await self._request(name, Nack(name, node, seqs, delay_ms, lease_ids))

    async def extend(self, name: str, node: str, seqs: list[int], lease_ms: int,
                     lease_ids: list[str] | None = None) -> dict:
        """Set the deadline of held jobs to now + lease_ms."""
        return await self._request(name, Extend(name, node, seqs, lease_ms, lease_ids))

class NodeClient(AsyncClient):
    """The AsyncClient of a process of the node (the gateway). It reaches each shard on its
    ipc socket, the one where a `prevalidated` append is trusted (docs/PROTOCOL.md 3.1), and
    on TCP only while the shard map names no ipc endpoint (the shard then parses anyway)."""

    def _endpoint(self, shard: int) -> str:
        return self.endpoint if shard == FRONT else self._map.endpoint(shard, local=True)
