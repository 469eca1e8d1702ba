"""The request-handling core of the gateway: route, authorize, validate, forward, render.

It sees only HttpRequest/HttpResponse and an EngineLink, so everything but the sockets is
tested in-process (tests/unit/test_gateway_core.py). Order per request (spec/api.md 1, 2):
route (404/405, after a 401 when auth is on) -> key (401) -> scope (403) -> the topic
name's prefix allowlist (403, before any existence check) -> in-flight cap (429) ->
Content-Type (415) and body (400) -> the shard. Every failure is the error envelope.

The route table (route_table.py) names a route's handler; `handlers`, built here, is the
table of the functions that answer each name, grouped by concern: probes (probe_api.py),
topics and records (topic_api.py), routers (router_api.py), watch streams (stream_api.py),
queues (queue_api.py), the recovery quarantine (quarantine_api.py), replica checksums
(copy_compare.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from topics_actors.errors import (
    ErrorCode, InvariantViolation, TopicsError, shutting_down,
)
from topics_actors.gateway import console_files
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, check_name, check_scope
from topics_actors.gateway.head_reads import HeadReads
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, HttpStream, error_response,
)
from topics_actors.gateway.inflight_limit import InflightLimit
from topics_actors.gateway.probe_api import ProbeApi
from topics_actors.gateway.cluster_moves import ClusterMoves
from topics_actors.gateway.copy_compare import CopyCompare
from topics_actors.gateway.quarantine_api import QuarantineApi
from topics_actors.gateway.queue_api import QueueApi
from topics_actors.gateway.request_stats import RequestStats
from topics_actors.gateway.route_table import (
    PROBE, PUBLIC, SESSION, STOPPING_REFUSED, TOKEN_HANDLERS, UNMATCHED, Route, not_found,
    resolve, unknown_route_error,
)
from topics_actors.gateway.router_api import RoutedReads, RouterApi
from topics_actors.gateway.stream_api import StreamApi
from topics_actors.gateway.topic_api import TopicApi
from topics_actors.gateway.watch_service import WatchService
from topics_actors.gateway.work_service import WorkService
from topics_actors.gateway.ws_service import WsService

log = logging.getLogger(__name__)

# (route, request, key or None, t0 in perf_counter ns) -> the answer
Handler = Callable[[Route, HttpRequest, ApiKey | None, int],
                   Awaitable[HttpResponse | HttpStream]]


async def unknown(route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
    raise unknown_route_error(route, request.path)


async def console(route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
    """The console's static files (console_files.py)."""
    return console_files.response(request.path)


class GatewayCore:
    def __init__(self, settings: GatewaySettings, engine: EngineLink, started_ms: int,
                 zmq_port: int = 0, requests: RequestStats | None = None,
                 heads: HeadReads | None = None):
        """`zmq_port`: the node's ZeroMQ front, for clients to discover (health); `heads`:
        the shards' head tables, for caught-up diffs (head_reads.py)."""
        self.settings = settings
        self.keys = settings.keys
        self.engine = engine
        self.inflight = InflightLimit(settings.inflight_per_key_max)
        self.stopping = False
        self.requests = requests if requests is not None else RequestStats(None, 0)
        self.watch = WatchService(settings, engine)
        self.work = WorkService(self.watch)
        routed_reads = RoutedReads(engine)
        self.topics = TopicApi(settings, engine, routed_reads, heads)
        self.ws = WsService(self.watch, self.work, self.topics.append_reply)
        self.handlers = self._handler_table(ProbeApi(engine, started_ms, zmq_port,
                                                     self.requests, self.watch),
                                            RouterApi(settings, engine, routed_reads))

    def _handler_table(self, probes: ProbeApi, routers: RouterApi) -> dict[str, Handler]:
        """Each route name of route_table.py -> the function that answers it."""
        topics, queues = self.topics, QueueApi(self.engine, self.work)
        streams, quarantine = StreamApi(self.keys, self.watch), QuarantineApi(self.engine)
        moves = ClusterMoves(self.engine)
        return {
            "health": probes.health,
            "console": console,
            "ready": probes.ready,
            "metrics": probes.metrics,
            "cluster": probes.cluster,
            "cluster_move": moves.move,
            "cluster_drain": moves.drain,
            "list_topics": topics.list,
            "put_topic": topics.put,
            "get_topic": topics.get,
            "delete_topic": topics.delete,
            "append": topics.append,
            "diff": topics.diff,
            "delete_records": topics.delete_records,
            "put_router": routers.put,
            "get_router": routers.get,
            "delete_router": routers.delete,
            "list_routers": routers.list,
            "watch_create": streams.watch_create,
            "watch_stream": streams.watch_stream,
            "websocket": streams.websocket,
            "claim": queues.claim,
            "ack": queues.settle,
            "nack": queues.settle,
            "extend": queues.settle,
            "work_stream": queues.work_stream,
            "quarantine_list": quarantine.list,
            "quarantine_repair": quarantine.repair,
            "checksum": CopyCompare(self.engine).checksum,
            "unknown": unknown,
        }

    def stop(self) -> None:
        """Shutdown: new readiness probes and watch streams get 503 shutting_down, watch
        streams end with their `error` frame, and parked long polls are answered now."""
        self.stopping = True
        self.watch.stop()
        self.topics.stop()

    async def handle(self, request: HttpRequest) -> HttpResponse | HttpStream:
        t0 = time.perf_counter_ns()
        route, response = await self._handle(request, t0)
        if request.method == "HEAD" and isinstance(response, HttpResponse):
            response = dataclasses.replace(response, body=b"")   # the GET's status, headers
        self.requests.record(route, response.status, time.perf_counter_ns() - t0)
        return response

    async def _handle(self, request: HttpRequest,
                      t0: int) -> tuple[str, HttpResponse | HttpStream]:
        """The handler's name (the metrics' route label) and the answer."""
        name = UNMATCHED
        try:
            route = self._route(request)
            name = route.handler
            key = self._authorize(route, request)
            limit = self.settings.body_bytes_max
            if limit and len(request.body) > limit:
                raise rb.payload_too_large(limit)
            handler = self.handlers[name]
            if key is None or not self.inflight.per_key_max:      # nothing to count
                if self.stopping and name in STOPPING_REFUSED:
                    raise shutting_down()
                return name, await handler(route, request, key, t0)
            with self.inflight.admit(key.label):    # a 429 there comes before a 503 here
                if self.stopping and name in STOPPING_REFUSED:
                    raise shutting_down()
                return name, await handler(route, request, key, t0)
        except TopicsError as error:
            return name, error_response(error)
        except AssertionError:      # InvariantViolation or a failed assert: a bug
            raise           # the process's top level (http_server) ends the process
        except Exception:
            log.exception("event=request_failed method=%s", request.method)
            return name, error_response(TopicsError("internal error", ErrorCode.INTERNAL))

    def _route(self, request: HttpRequest) -> Route:
        try:
            return resolve(request.method, request.path)
        except TopicsError:
            self.keys.authenticate(request.header("authorization"))   # 401 before 404/405
            raise

    def _authorize(self, route: Route, request: HttpRequest) -> ApiKey | None:
        authorization = request.header("authorization")
        if route.scope in (SESSION, PUBLIC):   # a stream checks its session's own key
            return None
        if route.scope == PROBE:
            if self.settings.probe_auth:
                self.keys.authenticate(authorization)
            return None
        if not authorization and route.handler in TOKEN_HANDLERS:
            token = rb.query_params(request.query).get("token")
            authorization = f"Bearer {token}" if token else None
        key = self.keys.authenticate(authorization)
        check_scope(key, route.scope)
        if route.topic is not None:
            check_name(key, route.topic)
        return key

    async def websocket(self, request: HttpRequest, upgrade) -> None:
        """An upgrade request: refused with a bare status (404 another path, 401 no valid
        key, 503 stopping, 429 over the SSE caps), or accepted and served until the socket
        ends. `upgrade` has reject(status) and accept() -> a WsChannel."""
        t0, name = time.perf_counter_ns(), UNMATCHED
        try:
            route = self._route(request)
            key = self.keys.authenticate(request.header("authorization"))   # 401 before 404
            if route.handler != "websocket":
                raise not_found("only /v0/ws takes a WebSocket upgrade")
            name = route.handler
            if self.stopping:
                raise shutting_down()
            connection, lease = await self.ws.admit(key)
        except TopicsError as error:
            self.requests.record(name, error.status, time.perf_counter_ns() - t0)
            upgrade.reject(error.status)
            return
        self.requests.record(name, 101, time.perf_counter_ns() - t0)
        await self.ws.serve(connection, lease, upgrade.accept)
