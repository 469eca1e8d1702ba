"""The request-handling core of the gateway: route, authorize, validate, forward, render.

It sees only HttpRequest/HttpResponse and an EngineLink, so everything but the sockets is
tested in-process (tests/unit/test_gateway_core.py). Order per request (spec/api.md 1, 2):
route (404/405, after a 401 when auth is on) -> key (401) -> scope (403) -> the topic
name's prefix allowlist (403, before any existence check) -> in-flight cap (429) ->
Content-Type (415) and body (400) -> the shard. Every failure is the error envelope.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time

from topics_actors import __version__
from topics_actors.client.retry_budget import new_session
from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError, invalid
from topics_actors.client import router_admin
from topics_actors.gateway import (
    console_files, quarantine_api, queue_api, replication_report, router_api,
)
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, check_name, check_scope, forbidden
from topics_actors.gateway.append_body import parse_append
from topics_actors.gateway.append_coalescer import AppendCoalescer
from topics_actors.gateway.diff_page import render_diff
from topics_actors.gateway.engine_link import Census, EngineLink, node_ready
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, HttpStream, error_response, json_response,
)
from topics_actors.gateway.inflight_limit import InflightLimit
from topics_actors.gateway.metrics_report import MetricsInput, render
from topics_actors.gateway.request_stats import RequestStats
from topics_actors.gateway.route_table import (
    PROBE, PUBLIC, SESSION, TOKEN_HANDLERS, UNMATCHED, Route, not_found, resolve,
    unknown_route_error,
)
from topics_actors.gateway.topic_listing import list_page
from topics_actors.gateway.watch_service import WatchService
from topics_actors.gateway.work_service import WorkService
from topics_actors.gateway.ws_service import WsService
from topics_actors.limits import CLAIM_WAIT_MS_MAX, DIFF_WAIT_MS_MAX
from topics_actors.protocol.messages import (
    DeleteRecords, DeleteTopic, Diff, GetTopic, PutTopic, RepairTopic,
)
from topics_actors.topic_config import parse_config
from topics_actors.topic_identity import valid_topic_name

log = logging.getLogger(__name__)

QUOTA_MAX_AGE_S = 1.0       # how stale the topic count and live bytes of a cap check may be


def _ms(t0_ns: int) -> float:
    return (time.perf_counter_ns() - t0_ns) / 1e6


def _with_performance(reply: dict, t0_ns: int) -> dict:
    performance = dict(reply.get("performance") or {})
    performance["server_total_ms"] = _ms(t0_ns)
    reply["performance"] = performance
    return reply


def cap_reached(limit: str, maximum: int) -> TopicsError:
    return TopicsError(f"the node's {limit} cap ({maximum}) is reached", ErrorCode.THROTTLED,
                       {"limit": limit, "max": maximum})


def shutting_down() -> TopicsError:
    return TopicsError("the gateway is shutting down", ErrorCode.SHUTTING_DOWN)


class GatewayCore:
    def __init__(self, settings: GatewaySettings, engine: EngineLink, started_ms: int,
                 zmq_port: int = 0, requests: RequestStats | None = None):
        self.settings = settings
        self.zmq_port = zmq_port        # the node's ZeroMQ front, for clients to discover
        self.keys = settings.keys
        self.engine = engine
        self.started_ms = started_ms
        self.inflight = InflightLimit(settings.inflight_per_key_max)
        self.stopping = False
        self._parked: set[asyncio.Future] = set()     # long polls' stop signals
        self._session = new_session()
        self._appends = itertools.count(1)
        self.appends = AppendCoalescer(lambda topic, msg: self.engine.call(topic, msg),
                                       self._session_key)
        self.watch = WatchService(settings, engine)
        self.work = WorkService(self.watch)
        self.ws = WsService(self.watch, self.work, self.append_reply)
        self.routed_reads = router_api.RoutedReads(engine)
        self.requests = requests if requests is not None else RequestStats(None, 0)

    def _session_key(self) -> str:
        """The next key of this gateway's session: an append the client sent without one
        gets it, so the client library's retry after a lost reply never appends twice."""
        return f"{self._session}:{next(self._appends)}"

    def stop(self) -> None:
        """Shutdown: new readiness probes and watch streams get 503 shutting_down, watch
        streams end with their `error` frame, and parked long polls are answered now."""
        self.stopping = True
        self.watch.stop()
        for woken in self._parked:
            if not woken.done():
                woken.set_result(None)

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
            handler = getattr(self, "_" + name)
            if key is None or not self.inflight.per_key_max:      # nothing to count
                return name, await handler(route, request, key, t0)
            with self.inflight.admit(key.label):
                return name, await handler(route, request, key, t0)
        except TopicsError as error:
            return name, error_response(error)
        except InvariantViolation:
            raise           # a bug: the process's top level (http_server) ends the process
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

    # --- probes -------------------------------------------------------------------------------

    def _uptime_ms(self) -> int:
        return max(0, time.time_ns() // 1_000_000 - self.started_ms)

    async def _health(self, route, request, key, t0) -> HttpResponse:
        return json_response(200, {"status": "ok", "version": __version__,
                                   "uptime_ms": self._uptime_ms(), "zmq_port": self.zmq_port})

    async def _console(self, route, request, key, t0) -> HttpResponse:
        return console_files.response(request.path)

    async def _cluster(self, route, request, key, t0) -> HttpResponse:
        """The node's view of its cluster (TOPICS_ZK): the supervisor's, kept in its map."""
        cluster = (await self.engine.node_status()).get("cluster")
        if cluster is None:
            raise TopicsError("this node is not in a cluster (TOPICS_ZK is unset)",
                              ErrorCode.NOT_FOUND)
        found = replication_report.gather(await self.engine.shard_statuses())
        return json_response(200, {**replication_report.with_lag(cluster, found),
                                   "performance": {"server_total_ms": _ms(t0)}})

    async def _ready(self, route, request, key, t0) -> HttpResponse:
        if self.stopping:
            raise shutting_down()
        ready, progress = await node_ready(self.engine)
        if not ready:
            raise TopicsError("the node is replaying its WAL", ErrorCode.NOT_READY,
                              {"replay_progress": progress})
        statuses = await self.engine.shard_statuses()
        found = quarantine_api.survey(statuses)
        return json_response(200, {"status": "ready", "wal_replay_complete": True,
                                   "topics": sum(s["topics"] for s in statuses),
                                   **quarantine_api.ready_fields(found)})

    async def _metrics(self, route, request, key, t0) -> HttpResponse:
        ready, progress = await node_ready(self.engine)
        census, wal, streams = Census(), {}, {"sse_connections": 0, "watch_sessions": 0}
        routers = {"routers": 0, "routers_forwarded": 0}
        statuses = await self.engine.shard_statuses() if ready else []
        if ready:
            census = await self.engine.census(0.0)
            for status in statuses:
                for name, value in status.get("statistics", {}).items():
                    wal[name] = wal.get(name, 0) + value
                streams["sse_connections"] += status.get("sse_streams", 0)
                streams["watch_sessions"] += status.get("watch_sessions", 0)
                for name in routers:
                    routers[name] += status.get(name, 0)
        body, content_type = render(
            MetricsInput(census, ready, 1.0 if ready else progress, self._uptime_ms(), wal,
                         streams, self.requests.figures(), self.requests.slot, routers,
                         quarantine_api.survey(statuses), replication_report.gather(statuses),
                         self.watch.page_counts()),
            request.header("accept"))
        return HttpResponse(200, body, content_type)

    # --- topics -------------------------------------------------------------------------------

    async def _list_topics(self, route, request, key, t0) -> HttpResponse:
        params = rb.query_params(request.query)
        page = await list_page(self.engine, key, params)
        return json_response(200, _with_performance(page, t0))

    async def _put_topic(self, route, request, key, t0) -> HttpResponse:
        name = route.topic
        if not valid_topic_name(name):
            raise invalid("invalid topic name", {"topic": name})
        body = rb.json_object(request, empty_ok=True)
        parse_config(body, name)
        cap = self.settings.topics_max
        if cap and await self.engine.topic_count(QUOTA_MAX_AGE_S) >= cap:
            try:
                await self.engine.call(name, GetTopic(name, False))
            except TopicsError as error:
                if error.code == ErrorCode.TOPIC_NOT_FOUND:
                    raise cap_reached("max_topics", cap) from None
                raise
        reply = await self.engine.call(name, PutTopic(name, body))
        if reply.get("created"):
            self.engine.topic_created()
        reply["performance"] = {"server_total_ms": 0.0}
        return json_response(201 if reply.get("created") else 200, reply)

    async def _get_topic(self, route, request, key, t0) -> HttpResponse:
        touch = rb.query_bool(rb.query_params(request.query), "touch", True)
        await self.routed_reads.settle(route.topic)
        reply = await self.engine.call(route.topic, GetTopic(route.topic, touch))
        return json_response(200, _with_performance(reply, t0))

    async def _delete_topic(self, route, request, key, t0) -> HttpResponse:
        if_empty = rb.query_bool(rb.query_params(request.query), "if_empty", False)
        reply = await self.engine.drive(router_admin.delete_topic(route.topic, if_empty))
        return json_response(200, _with_performance(reply, t0))

    async def _append(self, route, request, key, t0) -> HttpResponse:
        return_seqs = rb.query_bool(rb.query_params(request.query), "return_seqs", True)
        body = rb.json_object(request, empty_ok=False)
        status, reply = await self.append_reply(route.topic, body,
                                                request.header("idempotency-key"),
                                                return_seqs, key, t0)
        return json_response(status, reply)

    async def append_reply(self, name: str, body: dict, header_key: str | None,
                           return_seqs: bool, key: ApiKey | None, t0: int) -> tuple[int, dict]:
        """An append (spec/api.md 5.5) of an HTTP request or a WebSocket publish: its
        status (201 when it created the topic) and reply."""
        plan = parse_append(name, body, header_key, return_seqs, self._session_key())
        no_admin = (plan.message.config is not None and key is not None
                    and "admin" not in key.scopes)
        cap = self.settings.topics_max
        at_cap = bool(cap) and await self.engine.topic_count(QUOTA_MAX_AGE_S) >= cap
        msg = plan.message
        if no_admin or at_cap:     # may append to an existing topic, must not create one
            msg = dataclasses.replace(msg, create=False, config=None)
        try:
            reply = await self.appends.append(msg, plan.batchable, plan.wire_bytes,
                                              plan.count)
        except TopicsError as error:
            if error.code != ErrorCode.TOPIC_NOT_FOUND or msg is plan.message \
                    or not plan.may_create:
                raise
            if no_admin:
                raise forbidden("creating a topic with a config needs the admin scope",
                                name) from None
            raise cap_reached("max_topics", cap) from None
        if reply.get("created"):
            self.engine.topic_created()
        return 201 if reply.get("created") else 200, _with_performance(reply, t0)

    async def _diff(self, route, request, key, t0) -> HttpResponse:
        body = rb.json_object(request, empty_ok=True)
        include_meta = rb.field_bool(body, "include_meta", True)
        wait_ms = min(rb.field_uint(body, "wait_ms"), DIFF_WAIT_MS_MAX)
        msg = Diff(route.topic, rb.field_uint(body, "from_seq"), rb.field_uint(body, "limit"),
                   rb.field_nodes(body), rb.field_bool(body, "include_tags", False),
                   include_meta, wait_ms, rb.field_uint(body, "max_batch_bytes"))
        await self.routed_reads.settle(route.topic)
        reply = await self._long_poll(route.topic, msg)
        return HttpResponse(200, render_diff(reply, include_meta, _ms(t0)))

    async def _long_poll(self, topic: str, msg: Diff) -> dict:
        """The shard's reply to a diff that may park. Should the gateway stop meanwhile, the
        wait ends now: the same read again without waiting, which is the page a client gets
        when its wait_ms runs out (200, caught up, usually no records), so the gateway
        drains at once and the client simply polls again (docs/HTTP.md 2)."""
        if not msg.wait_ms:
            return await self.engine.call(topic, msg)
        if not self.stopping:
            woken = asyncio.get_running_loop().create_future()
            self._parked.add(woken)
            parked = asyncio.ensure_future(self.engine.call(topic, msg, msg.wait_ms))
            try:
                await asyncio.wait((parked, woken), return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._parked.discard(woken)
                if not parked.done():
                    parked.cancel()       # its late reply is dropped by the client
            if parked.done():
                return parked.result()
        return await self.engine.call(topic, dataclasses.replace(msg, wait_ms=0))

    async def _delete_records(self, route, request, key, t0) -> HttpResponse:
        body = rb.json_object(request, empty_ok=True)
        before_seq = rb.field_uint(body, "before_seq", None)
        match = body.get("match")
        if before_seq is None and match is None:
            raise invalid("a delete needs before_seq and/or match")
        if match is not None and not isinstance(match, (str, list)):
            raise invalid('match must be ["tag", "Eq"|"Glob", value] or a tag string')
        reply = await self.engine.call(route.topic,
                                       DeleteRecords(route.topic, before_seq, match))
        return json_response(200, _with_performance(reply, t0))

    # --- routers (gateway/router_api.py, client/router_admin.py) --------------------------------

    async def _put_router(self, route, request, key, t0) -> HttpResponse:
        reply = await router_api.put(self.engine, key, route.topic, request,
                                     self.settings.routers_max, self.settings.topics_max,
                                     QUOTA_MAX_AGE_S)
        self.routed_reads.forget()
        return json_response(201 if reply["created"] else 200, _with_performance(reply, t0))

    async def _get_router(self, route, request, key, t0) -> HttpResponse:
        reply = await router_api.get(self.engine, key, route.topic)
        await self.routed_reads.settle(reply["dest"])
        reply = await router_api.get(self.engine, key, route.topic)   # its settled total
        return json_response(200, _with_performance(reply, t0))

    async def _delete_router(self, route, request, key, t0) -> HttpResponse:
        reply = await router_api.delete(self.engine, key, route.topic)
        self.routed_reads.forget()
        return json_response(200, _with_performance(reply, t0))

    async def _list_routers(self, route, request, key, t0) -> HttpResponse:
        page = await router_api.list_page(self.engine, key, rb.query_params(request.query))
        return json_response(200, _with_performance(page, t0))

    # --- watch (spec/api.md 7.1, 7.2) ----------------------------------------------------------

    async def _watch_create(self, route, request, key, t0) -> HttpResponse:
        return json_response(200, await self.watch.create(request, key))

    async def _watch_stream(self, route, request, key, t0) -> HttpStream:
        if self.stopping:
            raise shutting_down()
        return await self.watch.open(request, route.wid)

    # --- WebSocket (spec/api.md 7.3; gateway/ws_service.py) ------------------------------------

    async def _websocket(self, route, request, key, t0) -> HttpResponse:
        self.keys.authenticate(request.header("authorization"))
        raise invalid("GET /v0/ws needs a WebSocket upgrade")

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

    # --- recovery quarantine (gateway/quarantine_api.py) ------------------------------------

    async def _quarantine_list(self, route, request, key, t0) -> HttpResponse:
        found = quarantine_api.survey(await self.engine.shard_statuses())
        return json_response(200, quarantine_api.listing(found))

    async def _quarantine_repair(self, route, request, key, t0) -> HttpResponse:
        reply = await self.engine.call(route.topic, RepairTopic(route.topic))
        return json_response(200, _with_performance(reply, t0))

    # --- queues (gateway/queue_api.py, gateway/work_service.py) ---------------------------------

    async def _work_stream(self, route, request, key, t0) -> HttpStream:
        if self.stopping:
            raise shutting_down()
        return await self.work.open(route.topic, request, key)

    async def _claim(self, route, request, key, t0) -> HttpResponse:
        msg = queue_api.claim_message(route.topic, request)
        reply = await self.engine.call(route.topic, msg, CLAIM_WAIT_MS_MAX)
        return HttpResponse(200, queue_api.render_claim(reply, _ms(t0)))

    async def _ack(self, route, request, key, t0) -> HttpResponse:
        """ack, nack and extend."""
        msg = queue_api.holder_message(route.handler, route.topic, request)
        reply = await self.engine.call(route.topic, msg)
        return json_response(200, _with_performance(reply, t0))

    _nack = _extend = _ack

    async def _unknown(self, route, request, key, t0) -> HttpResponse:
        raise unknown_route_error(route, request.path)
