"""GET /v0/topics/:t/checksum: do a topic's in-sync replicas hold the same records over a
seq range? (docs/CLUSTER.md 9; the digest is shard/copy_checksum.py's.)

The leader is asked first, for the range as given (to its high watermark by default), and
its answer fixes the range every other in-sync replica is asked for, so all digests cover
the same seqs: every in-sync replica holds the log up to the leader's watermark. Each copy
is asked on its own node (the node's front, under CURVE when the cluster serves it), not
through the leader. The answer lists each copy's digest and record count, or the error
that kept it from answering, and `agree`: every in-sync copy answered the same digest over
the same range. A single node, or a topic the cluster does not hold (a node's own topic
from before it joined), has one copy, which agrees with itself.
"""

from __future__ import annotations

import asyncio

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.http_message import HttpRequest, HttpResponse, json_response
from topics_actors.gateway.request_body import query_int, query_params
from topics_actors.gateway.route_table import Route
from topics_actors.protocol.messages import Checksum

_COPY_FIELDS = ("from_seq", "to_seq", "records", "checksum", "head_seq", "hw")


def _copy(reply: dict) -> dict:
    return {name: reply[name] for name in _COPY_FIELDS}


async def compare(engine, topic: str, from_seq: int, to_seq: int) -> dict:
    cluster = (await engine.node_status()).get("cluster")
    state = (cluster or {}).get("topics", {}).get(topic)
    if state is None:
        reply = await engine.call(topic, Checksum(topic, from_seq, to_seq))
        node = cluster["node_id"] if cluster else "local"
        return _answer(topic, {node: _copy(reply)}, [node], reply, [])
    leader, isr = state["leader"], list(state["isr"])
    if leader is None:
        raise TopicsError(f"topic {topic!r} has no leader now; compare its copies once it "
                          f"has one", ErrorCode.NOT_READY, {"topic": topic})
    lead = await _ask(engine, cluster, leader, Checksum(topic, from_seq, to_seq))
    others = [node for node in isr if node != leader]
    span = Checksum(topic, lead["from_seq"], lead["to_seq"])
    replies = await asyncio.gather(*(_ask(engine, cluster, node, span) for node in others),
                                   return_exceptions=True)
    copies = {leader: _copy(lead)}
    for node, reply in zip(others, replies):
        if isinstance(reply, TopicsError):
            copies[node] = {"error": reply.code.wire, "message": reply.message}
        elif isinstance(reply, BaseException):
            raise reply
        else:
            copies[node] = _copy(reply)
    outside = [node for node in state.get("replicas", ()) if node not in isr]
    return _answer(topic, copies, [leader, *others], lead, outside)


def _answer(topic: str, copies: dict, isr: list[str], lead: dict, outside: list) -> dict:
    digests = {(c.get("from_seq"), c.get("to_seq"), c.get("records"), c.get("checksum"))
               for c in copies.values()}
    answered = all("error" not in c for c in copies.values())
    return {"topic": topic, "from_seq": lead["from_seq"], "to_seq": lead["to_seq"],
            "next_from_seq": lead["next_from_seq"], "until_seq": lead["until_seq"], "isr": isr,
            "not_compared": outside, "copies": copies,
            "agree": answered and len(digests) == 1}


async def _ask(engine, cluster: dict, node: str, msg: Checksum) -> dict:
    """`node`'s own copy's answer (this node's through its own shards)."""
    if node == cluster["node_id"]:
        return await engine.call(msg.topic, msg)
    info = cluster.get("nodes", {}).get(node)
    if info is None:
        raise TopicsError(f"node {node!r} is not registered now", ErrorCode.NOT_READY,
                          {"node": node})
    front = f"tcp://{info['advertise']}:{info['zmq_port']}"
    return await engine.call_node(front, info.get("curve_public"), msg.topic, msg)


class CopyCompare:
    """The route's handler (gateway_core.py's table names it)."""

    def __init__(self, engine):
        self.engine = engine

    async def checksum(self, route: Route, request: HttpRequest, key: ApiKey | None,
                       t0: int) -> HttpResponse:
        params = query_params(request.query)
        from_seq, to_seq = query_int(params, "from_seq"), query_int(params, "to_seq")
        for name, value in (("from_seq", from_seq), ("to_seq", to_seq)):
            if value is not None and value < 0:
                raise TopicsError(f"query {name} must not be negative",
                                  ErrorCode.INVALID_REQUEST)
        return json_response(200, await compare(self.engine, route.topic, from_seq or 0,
                                                to_seq or 0))
