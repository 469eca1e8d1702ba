"""The queue endpoints of the gateway (spec/api.md 8): POST /v0/topics/:q/claim, ack, nack
and extend.

The gateway only reads the body (a missing or mistyped field is 400 at parse, before the
shard is asked); the contract's checks and their order (node, batch size, lease ids, then
topic_not_found / not_a_queue; for a claim the topic first, then the node) are the shard's
(shard/queues/queue_ops.py), so ZeroMQ clients get the same answers, the reference's counts
(`acked`, `nacked`, `extended`) beside our seq lists. The scopes are the route table's
(a claim needs read and write). Claimed jobs are rendered with their stored payload
spliced, never re-parsed. `QueueApi`'s handlers take (route, request, key, t0); the
gateway's handler table (gateway_core.py) names them.
"""

from __future__ import annotations

from topics_actors.errors import invalid
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.claim_page import render_claim
from topics_actors.gateway.http_message import (
    HttpRequest, HttpResponse, HttpStream, elapsed_ms, json_response, with_performance,
)
from topics_actors.gateway.route_table import Route
from topics_actors.gateway.work_service import WorkService
from topics_actors.limits import CLAIM_WAIT_MS_MAX
from topics_actors.protocol.messages import Ack, Claim, Extend, Nack

_MISSING = object()


def _required(body: dict, name: str):
    value = body.get(name, _MISSING)
    if value is _MISSING:
        raise invalid(f"field {name!r} is required")
    return value


def _node(body: dict) -> str:
    node = _required(body, "node")
    if not isinstance(node, str):
        raise invalid("field 'node' must be a string")
    return node


def _seqs(body: dict) -> list[int]:
    seqs = _required(body, "seqs")
    if not isinstance(seqs, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= rb.U64_MAX
            for s in seqs):
        raise invalid("field 'seqs' must be a list of non-negative integers")
    return seqs


def _lease_ids(body: dict) -> list | None:
    value = body.get("lease_ids")
    if value is not None and (not isinstance(value, list)
                              or not all(isinstance(t, str) for t in value)):
        raise invalid("field 'lease_ids' must be a list of strings")
    return value


def claim_message(topic: str, request: HttpRequest) -> Claim:
    body = rb.json_object(request, empty_ok=False)
    return Claim(topic, _node(body), rb.field_uint(body, "max", 1),
                 rb.field_uint(body, "lease_ms", None))


def holder_message(kind: str, topic: str, request: HttpRequest) -> Ack | Nack | Extend:
    """The request of an `ack`, `nack` or `extend` route."""
    body = rb.json_object(request, empty_ok=False)
    node, seqs, lease_ids = _node(body), _seqs(body), _lease_ids(body)
    if kind == "ack":
        return Ack(topic, node, seqs, lease_ids)
    if kind == "nack":
        return Nack(topic, node, seqs, rb.field_uint(body, "delay_ms"), lease_ids)
    lease_ms = rb.field_uint(body, "lease_ms", None)
    if lease_ms is None:
        raise invalid("field 'lease_ms' is required")
    return Extend(topic, node, seqs, lease_ms, lease_ids)


class QueueApi:
    def __init__(self, engine, work: WorkService):
        self.engine = engine
        self.work = work

    async def claim(self, route: Route, request: HttpRequest, key: ApiKey | None,
                    t0: int) -> HttpResponse:
        msg = claim_message(route.topic, request)
        reply = await self.engine.call(route.topic, msg, CLAIM_WAIT_MS_MAX)
        return HttpResponse(200, render_claim(reply, elapsed_ms(t0)))

    async def settle(self, route: Route, request: HttpRequest, key: ApiKey | None,
                     t0: int) -> HttpResponse:
        """ack, nack and extend: the jobs a node holds, settled."""
        msg = holder_message(route.handler, route.topic, request)
        reply = await self.engine.call(route.topic, msg)
        return json_response(200, with_performance(reply, t0))

    async def work_stream(self, route: Route, request: HttpRequest, key: ApiKey | None,
                          t0: int) -> HttpStream:
        return await self.work.open(route.topic, request, key)
