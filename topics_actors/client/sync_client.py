"""The blocking client: one request in flight, routed straight to the owning shard, or,
with route=False, sent to the front, which forwards it (one address is all it needs).

Each method runs a flow of the client core (client_core.py: routing, retries, the
requests and replies of each operation) on the blocking transport (blocking_transport.py).
Not thread-safe (ZeroMQ sockets are not): use one Client per thread. The exception is
`append` on a client with linger (`linger_ms` > 0 or "auto"): any number of threads may call
it at once, since a sender thread of its own, with its own sockets, sends every append
(linger_sender.py); the other methods still want one thread at a time.
"""

from __future__ import annotations

import zmq

from topics_actors.client.blocking_transport import BlockingTransport
from topics_actors.client.blocking_watch import blocking_watch
from topics_actors.client.client_core import ClientCore, Request
from topics_actors.client.curve_credentials import CurveCredentials
from topics_actors.client.front_discovery import front_endpoint
from topics_actors.client.linger_batcher import (
    BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, WAITING_MAX_DEFAULT,
    ClientStatistics, LingerOptions, closed_error,
)
from topics_actors.client.linger_sender import LingerSender
from topics_actors.client.retry_budget import (
    CONNECT_TIMEOUT_MS, REQUEST_TIMEOUT_MS, RETRY_DEADLINE_MS,
)
from topics_actors.client.shard_map import DEFAULT_ENDPOINT


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

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, *,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS,
                 retry_deadline_ms: int = RETRY_DEADLINE_MS,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
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
        self._ctx = ctx or zmq.Context.instance()
        self._curve_keys = {"curve_server_key": curve_server_key,
                            "curve_public_key": curve_public_key,
                            "curve_secret_key": curve_secret_key}
        self._core = ClientCore(
            self.endpoint, route=route, node_local=node_local,
            request_timeout_ms=request_timeout_ms, retry_deadline_ms=retry_deadline_ms,
            connect_timeout_ms=connect_timeout_ms,
            curve=CurveCredentials.of(curve_server_key, curve_public_key, curve_secret_key))
        self._transport = BlockingTransport(self._ctx, self._core)
        self._run, self._send = self._transport.run, self._transport.send
        self._closed = False
        self._linger = None if linger is None else self._linger_sender(linger)

    def _linger_sender(self, linger: LingerOptions) -> LingerSender:
        """The sender thread, with a Client like this one without linger of its own."""
        sibling = Client(self.endpoint, request_timeout_ms=self.request_timeout_ms,
                         retry_deadline_ms=self.retry_deadline_ms,
                         connect_timeout_ms=self.connect_timeout_ms, ctx=self._ctx,
                         route=self.route, node_local=self.node_local, **self._curve_keys)
        return LingerSender(sibling.request, sibling._core.session_key, linger,
                            self.retry_deadline_ms, self.request_timeout_ms, sibling.close)

    def close(self) -> None:
        """Close the sockets; with linger, first send the appends that wait (and answer
        them) and stop the sender thread."""
        self._closed = True
        if self._linger is not None:
            self._linger.close()
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the API (the flows: client_core.py) ------------------------------------------------

    def status(self) -> dict:
        """The node's shard map and readiness, from the front endpoint."""
        return self._run(self._core.status())

    def request(self, topic: str | None, msg, wait_ms: int = 0) -> dict:
        """Send any request kind to the shard owning `topic`, with the client's retries;
        the raw reply."""
        return self._send(Request(topic, msg, wait_ms))

    def call_shard(self, shard: int, msg) -> dict:
        """Send any request kind to one shard (node processes: checkpoints, absorbed)."""
        return self._run(self._core.call_shard(shard, msg))

    def shard_statuses(self) -> list[dict]:
        """Each shard's own status: readiness, topic count and `statistics` (batches, syncs,
        records, requests, throttled, failed_batches)."""
        return self._run(self._core.shard_statuses())

    def put_topic(self, name: str, **config) -> dict:
        return self._send(self._core.put_topic(name, config))

    def get_topic(self, name: str, touch: bool = True) -> dict:
        return self._send(self._core.get_topic(name, touch))

    def delete_topic(self, name: str, if_empty: bool = False) -> dict:
        """Delete a topic; the routers with it as source or dest go with it."""
        return self._run(self._core.delete_topic(name, if_empty))

    def list_topics(self, prefix: str = "", page_size: int | None = None,
                    cursor: str | None = None, touch: bool = False) -> dict:
        return self._run(self._core.list_topics(prefix, page_size, cursor, touch))

    def delete_records(self, name: str, before_seq: int | None = None, match=None) -> dict:
        """Permanently delete records below before_seq and/or whose tag matches `match`
        (["tag", "Eq", v], ["tag", "Glob", "prefix*"] or a tag string)."""
        return self._send(self._core.delete_records(name, before_seq, match))

    def append(self, name: str, records: list[dict], **options) -> dict:
        """Append records ({"data", "tag"?, "node"?, "meta"?}) as one all-or-nothing batch.
        Options: node, idempotency_key, create, config, return_seqs. With linger,
        concurrent appends to `name` may travel in one request (docs/CLIENT.md "Linger")."""
        if self._linger is not None:
            if self._closed:
                raise closed_error()
            return self._linger.append(name, records, options)
        return self._send(self._core.append(name, records, options))

    def statistics(self) -> ClientStatistics:
        """The client's linger counters (zero without linger)."""
        return ClientStatistics() if self._linger is None else self._linger.statistics()

    def append_encoded(self, name: str, records: list[list], *, idempotency_key: str,
                       create: bool | None = None, config: dict | None = None) -> dict:
        """Append records already in wire form ([data JSON bytes, tag, node, meta]), e.g.
        JSON text taken as it is from a DataFrame column; seqs are not returned."""
        return self._send(self._core.append_encoded(name, records, idempotency_key, create,
                                                   config))

    def scan(self, name: str, after_seq: int = 0, until_seq: int = 0, limit: int = 0,
             max_batch_bytes: int = 0) -> dict:
        """The bulk range read in columns (docs/PROTOCOL.md `scan`), reply as it came."""
        return self._send(self._core.scan(name, after_seq, until_seq, limit, max_batch_bytes))

    def diff(self, name: str, from_seq: int = 0, limit: int = 0, *, node=None,
             include_tags: bool = False, include_meta: bool = True, wait_ms: int = 0,
             max_batch_bytes: int = 0) -> dict:
        return self._send(self._core.diff(name, from_seq, limit, node, include_tags,
                                         include_meta, wait_ms, max_batch_bytes))

    def watch(self, topics, **options):
        """The watch events of AsyncClient.watch as a blocking iterator (same arguments).
        It runs an AsyncClient on a private event loop, so it must not be called from a
        running event loop (use AsyncClient.watch there); close it (or leave the loop) to
        stop."""
        return blocking_watch(self.endpoint, {"request_timeout_ms": self.request_timeout_ms,
                                              "retry_deadline_ms": self.retry_deadline_ms,
                                              "route": self.route, **self._curve_keys},
                              topics, options)

    # --- queues (spec/api.md 8) -------------------------------------------------------------

    def claim(self, name: str, node: str, max: int = 1,
              lease_ms: int | None = None) -> dict:
        """Lease up to `max` jobs of queue `name` to `node`; jobs as API dicts."""
        return self._send(self._core.claim(name, node, max, lease_ms))

    def ack(self, name: str, node: str, seqs: list[int],
            lease_ids: list[str] | None = None) -> dict:
        """Delete the jobs `node` holds (fenced by `lease_ids` when given)."""
        return self._send(self._core.ack(name, node, seqs, lease_ids))

    def nack(self, name: str, node: str, seqs: list[int], delay_ms: int = 0,
             lease_ids: list[str] | None = None) -> dict:
        """Give held jobs back: claimable now, or after delay_ms."""
        return self._send(self._core.nack(name, node, seqs, delay_ms, lease_ids))

    def extend(self, name: str, node: str, seqs: list[int], lease_ms: int,
               lease_ids: list[str] | None = None) -> dict:
        """Set the deadline of held jobs to now + lease_ms."""
        return self._send(self._core.extend(name, node, seqs, lease_ms, lease_ids))

    # --- routers (spec/api.md 6; the rules: client/router_admin.py) -------------------------

    def put_router(self, name: str, source: str, dest: str, **options) -> dict:
        """Create a router (or update its knobs). Options: preserve_node, preserve_tag,
        create_dest, filter, allow_cycle, guarantee ("at_least_once" | "exactly_once")."""
        return self._run(self._core.put_router(name, source, dest, options))

    def get_router(self, name: str) -> dict:
        return self._run(self._core.get_router(name))

    def list_routers(self, prefix: str = "", source: str | None = None,
                     dest: str | None = None, page_size: int | None = None,
                     cursor: str | None = None) -> dict:
        return self._run(self._core.list_routers(prefix, source, dest, page_size, cursor))

    def delete_router(self, name: str) -> dict:
        """Delete a router; the records it copied stay in its dest."""
        return self._run(self._core.delete_router(name))
