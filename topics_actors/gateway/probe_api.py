"""The node's health, readiness, metrics and cluster view as the gateway serves them
(spec/api.md 10, docs/HTTP.md 12): GET /v0/health (/healthz), /v0/ready (/readyz),
/v0/metrics and /v0/cluster. Each handler takes (route, request, key, t0) and answers; the
gateway's handler table (gateway_core.py) names them.
"""

from __future__ import annotations

import time

from topics_actors import __version__
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import quarantine_api, replication_report
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.engine_link import Census, EngineLink, node_ready
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, elapsed_ms, json_response,
)
from topics_actors.gateway.metrics_report import MetricsInput, render
from topics_actors.gateway.request_stats import RequestStats
from topics_actors.gateway.route_table import Route
from topics_actors.gateway.watch_service import WatchService


class ProbeApi:
    def __init__(self, engine: EngineLink, started_ms: int, zmq_port: int,
                 requests: RequestStats, watch: WatchService):
        """`zmq_port`: the node's ZeroMQ front, for clients to discover (health)."""
        self.engine = engine
        self.watch = watch
        self.started_ms = started_ms
        self.zmq_port = zmq_port
        self.requests = requests

    def _uptime_ms(self) -> int:
        return max(0, time.time_ns() // 1_000_000 - self.started_ms)

    async def health(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
        return json_response(200, {"status": "ok", "version": __version__,
                                   "uptime_ms": self._uptime_ms(), "zmq_port": self.zmq_port})

    async def cluster(self, route: Route, request: HttpRequest, key: ApiKey | None,
                      t0: int) -> HttpResponse:
        """The node's view of its cluster (TOPICS_ZK): the supervisor's, kept in its map."""
        cluster = (await self.engine.node_status()).get("cluster")
        if cluster is None:
            raise TopicsError("this node is not in a cluster (TOPICS_ZK is unset)",
                              ErrorCode.NOT_FOUND)
        found = replication_report.gather(await self.engine.shard_statuses())
        return json_response(200, {**replication_report.with_lag(cluster, found),
                                   "performance": {"server_total_ms": elapsed_ms(t0)}})

    async def ready(self, route: Route, request: HttpRequest, key: ApiKey | None,
                    t0: int) -> HttpResponse:
        ready, progress = await node_ready(self.engine)
        if not ready:
            raise TopicsError("the node is replaying its WAL", ErrorCode.NOT_READY,
                              {"replay_progress": progress})
        statuses = await self.engine.shard_statuses()
        found = quarantine_api.survey(statuses)
        return json_response(200, {"status": "ready", "wal_replay_complete": True,
                                   "topics": sum(s["topics"] for s in statuses),
                                   **quarantine_api.ready_fields(found)})

    async def metrics(self, route: Route, request: HttpRequest, key: ApiKey | None,
                      t0: int) -> HttpResponse:
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
