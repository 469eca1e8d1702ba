"""The watch endpoints of the gateway (spec/api.md 7.1, 7.2): POST /v0/watch creates a
session, GET /v0/watch/:wid streams it (SSE, gateway/watch_service.py); and GET /v0/ws
without an upgrade, which is refused after the key is checked (a WebSocket upgrade is
GatewayCore.websocket's). Each handler takes (route, request, key, t0); the gateway's
handler table (gateway_core.py) names them.
"""

from __future__ import annotations

from topics_actors.errors import invalid
from topics_actors.gateway.api_keys import ApiKey, KeyRing
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, HttpStream, json_response,
)
from topics_actors.gateway.route_table import Route
from topics_actors.gateway.watch_service import WatchService


class StreamApi:
    def __init__(self, keys: KeyRing, watch: WatchService):
        self.keys = keys
        self.watch = watch

    async def watch_create(self, route: Route, request: HttpRequest, key: ApiKey | None,
                           t0: int) -> HttpResponse:
        return json_response(200, await self.watch.create(request, key))

    async def watch_stream(self, route: Route, request: HttpRequest, key: ApiKey | None,
                           t0: int) -> HttpStream:
        return await self.watch.open(request, route.wid)

    async def websocket(self, route: Route, request: HttpRequest, key: ApiKey | None,
                        t0: int) -> HttpResponse:
        self.keys.authenticate(request.header("authorization"))
        raise invalid("GET /v0/ws needs a WebSocket upgrade")
