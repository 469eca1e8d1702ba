"""The router endpoints of the gateway (spec/api.md 6): PUT, GET and DELETE
/v0/routers/:r and GET /v0/routers.

The rules live in client/router_admin.py (the ZeroMQ clients use the same); here is only
what is HTTP's: the body, and the key's prefix allowlist on the router's source and dest
(403 before any existence check; a list shows only routers whose name, source and dest the
key may use). `RouterApi`'s handlers take (route, request, key, t0); the gateway's handler
table (gateway_core.py) names them.
"""

from __future__ import annotations

import time

from topics_actors.client import router_admin
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import GetTopic, RouterSync
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, check_name
from topics_actors.gateway.engine_link import QUOTA_MAX_AGE_S
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, json_response, with_performance,
)
from topics_actors.gateway.route_table import Route
from topics_actors.ledger.router_state import parse_definition
from topics_actors.limits import DIFF_SETTLE_WAIT_MS


def _allowed(key: ApiKey | None, router: dict) -> bool:
    return key is None or all(key.allows_name(router[f])
                              for f in ("router", "source", "dest"))


async def put(engine, key: ApiKey | None, name: str, request: HttpRequest,
              routers_max: int, topics_max: int, max_age_s: float) -> dict:
    body = rb.json_object(request, empty_ok=False)
    definition = parse_definition(name, body)          # 400: missing source or dest
    check_name(key, definition.source)
    check_name(key, definition.dest)
    full = topics_max and await engine.topic_count(max_age_s) >= topics_max
    return await engine.drive(router_admin.put_router(name, body, routers_max,
                                                      topics_max if full else 0))


async def get(engine, key: ApiKey | None, name: str) -> dict:
    router = await engine.drive(router_admin.get_router(name))
    check_name(key, router["source"])
    check_name(key, router["dest"])
    return router


async def delete(engine, key: ApiKey | None, name: str) -> dict:
    try:
        await get(engine, key, name)      # the prefix checks of its source and dest
    except TopicsError as error:
        if error.code != ErrorCode.ROUTER_NOT_FOUND:
            raise
        return {"router": name, "deleted": False}
    return await engine.drive(router_admin.delete_router(name))


async def list_page(engine, key: ApiKey | None, params: dict[str, str]) -> dict:
    size = params.get("page_size")
    return await engine.drive(router_admin.list_routers(
        params.get("prefix", ""), params.get("source"), params.get("dest"),
        int(size) if size and size.isdigit() else None, params.get("cursor") or None,
        lambda r: _allowed(key, r)))


LOCAL_ROUTERS_MAX = 100_000     # routers remembered as reading a source of their own shard


class RoutedReads:
    """Read-your-writes on a router's destination (spec/api.md 6): before a diff or a GET
    of a topic that routers feed, wait (at most SYNC_WAIT_MS) until each of them has dealt
    with its source up to the source's head as it is now. Which topics routers feed is
    kept for CACHE_MAX_AGE_S (one list_routers per gateway and period, only while reads
    come); a router created through another gateway is honoured from the next refresh.
    A read of a topic that no router feeds costs nothing more."""

    CACHE_MAX_AGE_S = 1.0
    SYNC_WAIT_MS = DIFF_SETTLE_WAIT_MS

    def __init__(self, engine):
        self.engine = engine
        self.feeding: dict[str, list[tuple[str, str]]] = {}   # dest -> [(router, source)]
        self.taken_s = -1e9
        # routers whose source their destination's shard held on the last settled read
        self.local: set[str] = set()

    def forget(self) -> None:
        """Routers changed through this gateway: list them again on the next read."""
        self.taken_s = -1e9
        self.local.clear()

    def learn(self, found: dict) -> None:
        """Take in a settled read's {router: (cursor, its source's head if the shard holds
        the source, else None)}."""
        for router, (_cursor, head) in found.items():
            if head is None:
                self.local.discard(router)
            elif len(self.local) < LOCAL_ROUTERS_MAX:
                self.local.add(router)

    async def routers_into(self, dest: str) -> list[tuple[str, str]]:
        """[(router, source), ...] of the routers into `dest`, as last listed."""
        if time.monotonic() - self.taken_s > self.CACHE_MAX_AGE_S:
            self.taken_s = time.monotonic()
            feeding: dict[str, list[tuple[str, str]]] = {}
            for r in await self.engine.drive(router_admin.every_router()):
                feeding.setdefault(r["dest"], []).append((r["router"], r["source"]))
            self.feeding = feeding
        return self.feeding.get(dest, [])

    async def plan(self, dest: str, routers: list[tuple[str, str]] | None = None) -> list[list]:
        """[[router, its source's head now], ...] for the routers into `dest` (default:
        routers_into) (a diff's `settle`: the shard waits for them before it reads, in one
        round trip)."""
        plan = []
        for router, source in await self.routers_into(dest) if routers is None else routers:
            try:
                head = (await self.engine.call(source, GetTopic(source, False)))["head_seq"]
            except TopicsError:
                continue           # the source is gone: its routers go with it
            plan.append([router, head])
        return plan

    async def settle(self, dest: str, plan: list[list] | None = None,
                     deadline_s: float | None = None) -> None:
        """Wait until the routers into `dest` have dealt with their sources up to `plan`
        (by default, the sources' heads now), each for SYNC_WAIT_MS at most, or all until
        the monotonic `deadline_s`."""
        for router, head in await self.plan(dest) if plan is None else plan:
            deadline = (time.monotonic() + self.SYNC_WAIT_MS / 1000 if deadline_s is None
                        else deadline_s)
            while (left_ms := int((deadline - time.monotonic()) * 1000)) > 0:
                reply = await self.engine.call(dest, RouterSync(dest, router, head, left_ms),
                                               left_ms)
                if reply["caught_up"]:
                    break


class RouterApi:
    def __init__(self, settings: GatewaySettings, engine, routed_reads: RoutedReads):
        self.settings = settings
        self.engine = engine
        self.routed_reads = routed_reads

    async def put(self, route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
        reply = await put(self.engine, key, route.topic, request, self.settings.routers_max,
                          self.settings.topics_max, QUOTA_MAX_AGE_S)
        self.routed_reads.forget()
        return json_response(201 if reply["created"] else 200, with_performance(reply, t0))

    async def get(self, route: Route, request: HttpRequest, key: ApiKey | None,
                  t0: int) -> HttpResponse:
        reply = await get(self.engine, key, route.topic)
        await self.routed_reads.settle(reply["dest"])
        reply = await get(self.engine, key, route.topic)   # its settled total
        return json_response(200, with_performance(reply, t0))

    async def delete(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
        reply = await delete(self.engine, key, route.topic)
        self.routed_reads.forget()
        return json_response(200, with_performance(reply, t0))

    async def list(self, route: Route, request: HttpRequest, key: ApiKey | None,
                   t0: int) -> HttpResponse:
        page = await list_page(self.engine, key, rb.query_params(request.query))
        return json_response(200, with_performance(page, t0))
