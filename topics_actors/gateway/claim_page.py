"""A claim reply from the shard rendered as the /v0 JSON body (spec/api.md 8), and one
claimed job as an API object (the `/work` stream's `job` events too). Payloads are
spliced from their stored envelopes, never re-parsed (diff_page.record_payload).
"""

from __future__ import annotations

import orjson

from topics_actors.gateway.diff_page import record_payload


def render_job(job: list, opening: bytes = b"{") -> bytes:
    """One claimed job of a shard's claim reply as an API object; jobs carry no `$node`
    (spec/api.md 12.5). `opening` is `{` plus any members that come first (the `/work`
    stream's `"topic"`)."""
    seq, lease_id, deadline, ts, envelope, tag, deliveries, meta = job
    dumps = orjson.dumps
    head = opening + b'"$seq":%d,"lease_id":%s,"deadline":%d,"$ts":%d' % (
        seq, dumps(lease_id), deadline, ts)
    if tag is not None:
        head += b',"$tag":' + dumps(tag)
    return head + b',"deliveries":%d' % deliveries + record_payload(envelope, meta, True)


def render_claim(reply: dict, total_ms: float) -> bytes:
    """The shard's claim reply as the API body."""
    dumps, jobs = orjson.dumps, [render_job(job) for job in reply["claimed"]]
    return dumps({"topic": reply["topic"],
                  "claimed": orjson.Fragment(b"[" + b",".join(jobs) + b"]"),
                  "count": reply["count"], "ready": reply["ready"],
                  "performance": {**(reply.get("performance") or {}),
                                  "server_total_ms": total_ms}})
