"""The topic and record endpoints of the gateway (spec/api.md 5): list, put, get and delete
a topic; append (POST /v0/topics/:t, and a WebSocket publish), diff (a read that may
park) and delete records. Each handler takes (route, request, key, t0) and answers; the
gateway's handler table (gateway_core.py) names them.

Appends pass through the coalescer (append_coalescer.py): concurrent appends to one topic
leave as one Append. An append without an idempotency key of the client's gets one of the
gateway's session, so the client library's retry after a lost reply never appends twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time

from topics_actors.client import router_admin
from topics_actors.client.retry_budget import new_session
from topics_actors.errors import ErrorCode, TopicsError, cap_reached, invalid
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, forbidden
from topics_actors.gateway.head_reads import HeadReads
from topics_actors.gateway.append_body import parse_append
from topics_actors.gateway.append_coalescer import AppendCoalescer
from topics_actors.gateway.diff_page import render_diff
from topics_actors.gateway.engine_link import QUOTA_MAX_AGE_S, EngineLink
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, elapsed_ms, json_response, with_performance,
)
from topics_actors.gateway.route_table import Route
from topics_actors.gateway.router_api import RoutedReads
from topics_actors.gateway.topic_listing import list_page
from topics_actors.limits import DIFF_SETTLE_WAIT_MS, DIFF_WAIT_MS_MAX
from topics_actors.protocol.messages import DeleteRecords, Diff, GetTopic, PutTopic
from topics_actors.topic_config import parse_config
from topics_actors.topic_identity import valid_topic_name


class TopicApi:
    def __init__(self, settings: GatewaySettings, engine: EngineLink,
                 routed_reads: RoutedReads, heads: HeadReads | None = None):
        self.settings = settings
        self.engine = engine
        self.routed_reads = routed_reads
        self.heads = heads or HeadReads(None)      # no tables: every diff to the shard
        self.stopping = False
        self._parked: set[asyncio.Future] = set()     # long polls' stop signals
        self._session = new_session()
        self._appends = itertools.count(1)
        self.appends = AppendCoalescer(engine.call, self._session_key)

    def _session_key(self) -> str:
        """The next key of this gateway's session: an append the client sent without one
        gets it, so the client library's retry after a lost reply never appends twice."""
        return f"{self._session}:{next(self._appends)}"

    def stop(self) -> None:
        """Parked long polls are answered now (the page of a wait that ended)."""
        self.stopping = True
        for woken in self._parked:
            if not woken.done():
                woken.set_result(None)

    async def list(self, route: Route, request: HttpRequest, key: ApiKey | None,
                   t0: int) -> HttpResponse:
        page = await list_page(self.engine, key, rb.query_params(request.query))
        return json_response(200, with_performance(page, t0))

    async def put(self, route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
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

    async def get(self, route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
        touch = rb.query_bool(rb.query_params(request.query), "touch", True)
        await self.routed_reads.settle(route.topic)
        reply = await self.engine.call(route.topic, GetTopic(route.topic, touch))
        return json_response(200, with_performance(reply, t0))

    async def delete(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
        if_empty = rb.query_bool(rb.query_params(request.query), "if_empty", False)
        reply = await self.engine.drive(router_admin.delete_topic(route.topic, if_empty))
        return json_response(200, with_performance(reply, t0))

    async def append(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
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
        return 201 if reply.get("created") else 200, with_performance(reply, t0)

    async def diff(self, route: Route, request: HttpRequest, key: ApiKey | None,
                   t0: int) -> HttpResponse:
        body = rb.json_object(request, empty_ok=True)
        include_meta = rb.field_bool(body, "include_meta", True)
        wait_ms = min(rb.field_uint(body, "wait_ms"), DIFF_WAIT_MS_MAX)
        msg = Diff(route.topic, rb.field_uint(body, "from_seq"), rb.field_uint(body, "limit"),
                   rb.field_nodes(body), rb.field_bool(body, "include_tags", False),
                   include_meta, wait_ms, rb.field_uint(body, "max_batch_bytes"))
        reply = await self._settled_diff(msg)
        return HttpResponse(200, render_diff(reply, include_meta, elapsed_ms(t0)))

    async def _settled_diff(self, msg: Diff) -> dict:
        """A diff after the routers into its topic have copied their sources' heads
        (read-your-writes, docs/HTTP.md), waiting at most DIFF_SETTLE_WAIT_MS for them in
        all. A read that does not long-poll goes out beside the sources' heads
        (_read_beside_plan), and is kept when its routers had already copied that far;
        else the wait rides on the diff itself; when that comes back unsettled (woken by
        another write to the topic, or out of time), or for a long poll, router_sync
        waits out what is left."""
        deadline_s = time.monotonic() + DIFF_SETTLE_WAIT_MS / 1000
        routers = await self.routed_reads.routers_into(msg.topic)
        if not routers:
            return await (self._long_poll(msg.topic, msg) if msg.wait_ms
                          else self._plain_diff(msg))
        if msg.wait_ms:
            plan = await self.routed_reads.plan(msg.topic, routers)
        else:
            reply, plan = await self._read_beside_plan(msg, routers)
            if reply is not None:
                return reply
            reply = await self.engine.call(msg.topic, dataclasses.replace(msg, settle=plan),
                                           DIFF_SETTLE_WAIT_MS)
            if reply.get("settled", True):
                return reply
        await self.routed_reads.settle(msg.topic, plan, deadline_s)
        return await self._long_poll(msg.topic, msg)

    async def _read_beside_plan(self, msg: Diff, routers: list) -> tuple[dict | None, list]:
        """The read and the plan (the sources' heads now) at once, so the plan's round trip
        adds no latency: the read names the routers with cursor 0 (settled at once) and
        its reply carries their cursors at the read, and the head of each source the
        destination's shard holds itself. A router whose source that shard held on the
        last read (RoutedReads.local) is left out of the plan: the head in the reply,
        read after the client's writes in the shard that took them, serves. When each
        router had dealt with its source up to its head, the read holds every copy
        read-your-writes asks for: (reply, plan); else (None, plan) to read again
        settled."""
        local = self.routed_reads.local
        remote = [(r, source) for r, source in routers if r not in local]
        read = asyncio.ensure_future(self.engine.call(
            msg.topic, dataclasses.replace(msg, settle=[[r, 0] for r, _ in routers]),
            DIFF_SETTLE_WAIT_MS))
        try:
            planned = dict(await self.routed_reads.plan(msg.topic, remote) if remote else ())
        except BaseException:
            read.cancel()
            raise
        reply = await read
        found = {c[0]: (c[1], c[2] if len(c) > 2 else None)
                 for c in reply.get("router_cursors") or ()}
        self.routed_reads.learn(found)
        plan, kept, missing = [], True, []
        for router, source in routers:
            cursor, shard_head = found.get(router, (-1, None))
            head = planned.get(router, shard_head)
            if cursor is None or (head is None and (router, source) in remote):
                continue          # gone, or its source is (plan() leaves it out): settled
            if head is None:
                missing.append((router, source))
                kept = False
                continue
            plan.append([router, head])
            kept = kept and cursor >= head
        if kept:
            return reply, plan
        return None, plan + (await self.routed_reads.plan(msg.topic, missing) if missing else [])

    async def _plain_diff(self, msg: Diff) -> dict:
        """A diff that neither waits nor settles: at the head, answered from the shard's
        head table when the gateway knows the topic's slot (head_reads.py)."""
        heads = self.heads
        if msg.node is None and (page := heads.page(msg.topic, msg.from_seq)) is not None:
            return page
        if not heads.enabled:
            return await self.engine.call(msg.topic, msg)
        reply = await self.engine.call(msg.topic, dataclasses.replace(msg, head_slot=True))
        heads.learn(msg.topic, reply)
        return reply

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

    async def delete_records(self, route: Route, request: HttpRequest, key: ApiKey | None,
                             t0: int) -> HttpResponse:
        body = rb.json_object(request, empty_ok=True)
        before_seq = rb.field_uint(body, "before_seq", None)
        match = body.get("match")
        if before_seq is None and match is None:
            raise invalid("a delete needs before_seq and/or match")
        if match is not None and not isinstance(match, (str, list)):
            raise invalid('match must be ["tag", "Eq"|"Glob", value] or a tag string')
        reply = await self.engine.call(route.topic,
                                       DeleteRecords(route.topic, before_seq, match))
        return json_response(200, with_performance(reply, t0))
