"""Moving topics between a cluster's nodes over HTTP (docs/CLUSTER.md 8, docs/HTTP.md):
POST /v0/cluster/move {topic, replicas} and POST /v0/cluster/drain {node}, admin scope.
The node's cluster member stores each topic's target replicas in ZooKeeper and the answer
lists them; the controller carries the moves out, and GET /v0/cluster shows their progress
(a topic under way has a `target`). The handlers take (route, request, key, t0); the
gateway's handler table (gateway_core.py) names them."""

from __future__ import annotations

from topics_actors.errors import invalid
from topics_actors.gateway.api_keys import ApiKey, check_name
from topics_actors.key_scopes import forbidden
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.http_message import HttpRequest, HttpResponse, json_response, \
    with_performance
from topics_actors.gateway.request_body import field_str, json_object
from topics_actors.gateway.route_table import Route
from topics_actors.protocol.messages import Reassign


class ClusterMoves:
    def __init__(self, engine: EngineLink):
        self.engine = engine

    async def move(self, route: Route, request: HttpRequest, key: ApiKey | None,
                   t0: int) -> HttpResponse:
        body = json_object(request, empty_ok=False)
        topic, replicas = field_str(body, "topic"), body.get("replicas")
        if not topic:
            raise invalid("field 'topic' is required")
        if not isinstance(replicas, list) or not all(isinstance(n, str) for n in replicas):
            raise invalid("field 'replicas' must be a list of node ids")
        check_name(key, topic)
        return await self._ask(Reassign(topic=topic, replicas=replicas), t0)

    async def drain(self, route: Route, request: HttpRequest, key: ApiKey | None,
                    t0: int) -> HttpResponse:
        body = json_object(request, empty_ok=False)
        node = field_str(body, "node")
        if not node:
            raise invalid("field 'node' is required")
        if key is not None and key.prefixes:
            raise forbidden("this key is limited to prefixes: it may not move every topic")
        return await self._ask(Reassign(drain=node), t0)

    async def _ask(self, msg: Reassign, t0: int) -> HttpResponse:
        reply = await self.engine.node_request(msg)
        return json_response(200, with_performance(dict(reply), t0))
