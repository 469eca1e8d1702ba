"""The asyncio client: many requests in flight per shard, matched by correlation id.

Same API, retries and idempotency as the blocking Client, from the same core
(client_core.py) on the asyncio transport (async_transport.py); every method is a
coroutine. At most `max_in_flight` requests per shard are outstanding (a bounded window,
which also keeps a session's retries inside the shard's dedupe ring). With `linger_ms` > 0
or "auto", concurrent appends to one topic travel together in one request (async_linger.py).
"""

from __future__ import annotations

import zmq

from topics_actors.client.async_linger import AsyncLinger
from topics_actors.client.async_transport import AsyncTransport
from topics_actors.client.client_core import ClientCore, Request
from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.client.front_discovery import front_endpoint
from topics_actors.client.linger_batcher import (
    BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, IN_FLIGHT_MAX_DEFAULT,
    WAITING_MAX_DEFAULT, ClientStatistics, LingerOptions,
)
from topics_actors.client.retry_budget import (
    CONNECT_TIMEOUT_MS, REQUEST_TIMEOUT_MS, RETRY_DEADLINE_MS,
)
from topics_actors.client.router_admin import Steps
from topics_actors.client.shard_map import DEFAULT_ENDPOINT
from topics_actors.client.topic_watch import WATCH_WAIT_MS_DEFAULT, watch_events


class AsyncClient:
    """`endpoint`, `route` and the linger options as for Client; an HTTP URL is resolved
    here, with a blocking request of at most `request_timeout_ms` (build the client before
    the loop is busy). `linger_in_flight_max` (linger_ms "auto" only): requests of one topic
    in flight before its appends gather for the next one (docs/CLIENT.md "Linger")."""

    NODE_LOCAL = False     # NodeClient: a process of the node, on the shards' ipc sockets

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS,
                 retry_deadline_ms: int = RETRY_DEADLINE_MS, max_in_flight: int = 256,
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
        self.request_timeout_ms = request_timeout_ms
        self.retry_deadline_ms = retry_deadline_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_in_flight = max_in_flight
        self._core = ClientCore(
            self.endpoint, route=route, node_local=self.NODE_LOCAL,
            request_timeout_ms=request_timeout_ms, retry_deadline_ms=retry_deadline_ms,
            connect_timeout_ms=connect_timeout_ms,
            curve=CurveCredentials.of(curve_server_key, curve_public_key, curve_secret_key))
        self._transport = AsyncTransport(ctx or zmq.Context.instance(), self._core,
                                         request_timeout_ms, max_in_flight,
                                         lanes=self.NODE_LOCAL)
        self._run, self._send = self._transport.run, self._transport.send
        self._linger = None if linger is None else AsyncLinger(
            self.request, self._core.session_key, linger)

    def statistics(self) -> ClientStatistics:
        """The client's linger counters (zero without linger)."""
        return ClientStatistics() if self._linger is None else self._linger.statistics()

    async def close(self) -> None:
        """Close the connections; with linger, first send the waiting appends and wait for
        their answers."""
        if self._linger is not None:
            await self._linger.close()
        self._transport.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def status(self) -> dict:
        return await self._run(self._core.status())

    async def request(self, topic: str | None, msg, wait_ms: int = 0) -> dict:
        """Send any request kind to the shard owning `topic`; the raw reply (the gateway
        builds its own messages and renders replies itself)."""
        return await self._send(Request(topic, msg, wait_ms))

    async def node_request(self, msg) -> dict:
        """`msg` to the node's front, which answers it itself (a cluster move)."""
        return await self._run(self._core.node_request(msg))

    async def shard_statuses(self) -> list[dict]:
        return await self._run(self._core.shard_statuses())

    async def put_topic(self, name: str, **config) -> dict:
        return await self._send(self._core.put_topic(name, config))

    async def get_topic(self, name: str, touch: bool = True) -> dict:
        return await self._send(self._core.get_topic(name, touch))

    async def delete_topic(self, name: str, if_empty: bool = False) -> dict:
        """Delete a topic; the routers with it as source or dest go with it."""
        return await self._run(self._core.delete_topic(name, if_empty))

    # --- routers (spec/api.md 6; the rules: client/router_admin.py) ------------------------

    async def drive(self, steps: Steps) -> dict:
        """Run a router_admin operation: send what it yields, give it the replies."""
        return await self._run(self._core.drive(steps))

    async def put_router(self, name: str, source: str, dest: str, **options) -> dict:
        """Create a router (or update its knobs). Options: preserve_node, preserve_tag,
        create_dest, filter, allow_cycle, guarantee ("at_least_once" | "exactly_once")."""
        return await self._run(self._core.put_router(name, source, dest, options))

    async def get_router(self, name: str) -> dict:
        return await self._run(self._core.get_router(name))

    async def list_routers(self, prefix: str = "", source: str | None = None,
                           dest: str | None = None, page_size: int | None = None,
                           cursor: str | None = None) -> dict:
        return await self._run(self._core.list_routers(prefix, source, dest, page_size,
                                                       cursor))

    async def delete_router(self, name: str) -> dict:
        """Delete a router; the records it copied stay in its dest."""
        return await self._run(self._core.delete_router(name))

    async def delete_records(self, name: str, before_seq: int | None = None,
                             match=None) -> dict:
        return await self._send(self._core.delete_records(name, before_seq, match))

    async def list_topics(self, prefix: str = "", page_size: int | None = None,
                          cursor: str | None = None, touch: bool = False) -> dict:
        return await self._run(self._core.list_topics(prefix, page_size, cursor, touch))

    async def append(self, name: str, records: list[dict], **options) -> dict:
        if self._linger is not None:
            return await self._linger.append(name, records, options)
        return await self._send(self._core.append(name, records, options))

    async def diff(self, name: str, from_seq: int = 0, limit: int = 0, *, node=None,
                   include_tags: bool = False, include_meta: bool = True, wait_ms: int = 0,
                   max_batch_bytes: int = 0) -> dict:
        return await self._send(self._core.diff(name, from_seq, limit, node, include_tags,
                                               include_meta, wait_ms, max_batch_bytes))

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

    async def claim(self, name: str, node: str, max: int = 1,
                    lease_ms: int | None = None) -> dict:
        """Lease up to `max` jobs of queue `name` to `node`; jobs as API dicts."""
        return await self._send(self._core.claim(name, node, max, lease_ms))

    async def ack(self, name: str, node: str, seqs: list[int],
                  lease_ids: list[str] | None = None) -> dict:
        """Delete the jobs `node` holds (fenced by `lease_ids` when given)."""
        return await self._send(self._core.ack(name, node, seqs, lease_ids))

    async def nack(self, name: str, node: str, seqs: list[int], delay_ms: int = 0,
                   lease_ids: list[str] | None = None) -> dict:
        """Give held jobs back: claimable now, or after delay_ms."""
        return await self._send(self._core.nack(name, node, seqs, delay_ms, lease_ids))

    async def extend(self, name: str, node: str, seqs: list[int], lease_ms: int,
                     lease_ids: list[str] | None = None) -> dict:
        """Set the deadline of held jobs to now + lease_ms."""
        return await self._send(self._core.extend(name, node, seqs, lease_ms, lease_ids))


class NodeClient(AsyncClient):
    """The AsyncClient of a process of the node (the gateway). It reaches each shard on its
    lane, next to the ipc socket (both are where a `prevalidated` append is trusted,
    docs/PROTOCOL.md 3.1 and 3.8), and on TCP only while the shard map names no ipc
    endpoint (the shard then parses anyway)."""

    NODE_LOCAL = True

    def ipc_of(self, topic: str) -> str:
        """The ipc endpoint of the shard that owns `topic` ("" while the map is unknown
        or names none): where its head table lies (protocol/head_table.py)."""
        shards = self._core.map
        return shards.ipcs[shards.shard_for(topic)] if shards is not None and shards.ipcs else ""
