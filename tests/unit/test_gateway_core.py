"""The gateway's request core without sockets: routing, API keys, body and query parsing,
the append plan, payload splicing, list narrowing, metrics rendering, limits, and the
order of checks in GatewayCore against a fake engine."""

import asyncio
import json

import orjson
import pytest

from topics_actors.client.async_client import AsyncClient
from topics_actors.client.shard_map import ShardMap
from topics_actors.errors import ErrorCode, TopicsError, quarantined, topic_not_found
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import KeySyntaxError, parse_api_keys
from topics_actors.gateway.append_body import parse_append
from topics_actors.gateway.diff_page import render_diff, render_records
from topics_actors.gateway.engine_link import Census, EngineLink
from topics_actors.gateway.gateway_core import GatewayCore
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.http_message import HttpRequest
from topics_actors.gateway.inflight_limit import InflightLimit
from topics_actors.gateway.metrics_report import MetricsInput, metrics_json, metrics_text
from topics_actors.gateway.quarantine_api import survey
from topics_actors.gateway.route_table import UNMATCHED, handler_names, resolve
from topics_actors.gateway.topic_listing import narrowed_prefixes
from topics_actors.protocol.messages import (
    Append, DeleteRouters, GetTopic, ListRouters, PutTopic, RepairTopic,
)
from topics_actors.record_envelope import build as append_envelope

JSON_CT = {"content-type": "application/json"}


# --- routes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path,handler,scope,topic", [
    ("GET", "/healthz", "health", "probe", None), ("GET", "/v0/ready", "ready", "probe", None),
    ("GET", "/v0/metrics", "metrics", "read", None),
    ("GET", "/v0/topics", "list_topics", "read", None),
    ("PUT", "/v0/topics/a", "put_topic", "admin", "a"),
    ("GET", "/v0/topics/a", "get_topic", "read", "a"),
    ("DELETE", "/v0/topics/a", "delete_topic", "delete", "a"),
    ("POST", "/v0/topics/a", "append", "write", "a"),
    ("POST", "/v0/topics/a/diff", "diff", "read", "a"),
    ("POST", "/v0/topics/a/delete", "delete_records", "delete", "a"),
    ("POST", "/v0/topics/a/claim", "claim", ("read", "write"), "a"),
    ("POST", "/v0/topics/a/ack", "ack", "write", "a"),
    ("POST", "/v0/topics/a/nack", "nack", "write", "a"),
    ("POST", "/v0/topics/a/extend", "extend", "write", "a"),
    ("GET", "/v0/topics/a/work", "work_stream", ("read", "write"), "a"),
    ("GET", "/v0/topics/a/b/c", "unknown", "write", "a"),
    ("GET", "/v0/quarantine", "quarantine_list", "admin", None),
    ("POST", "/v0/quarantine/a/repair", "quarantine_repair", "admin", "a"),
])
def test_routes(method, path, handler, scope, topic):
    route = resolve(method, path)
    assert (route.handler, route.scope, route.topic) == (handler, scope, topic)


@pytest.mark.parametrize("method,path,code", [
    ("GET", "/", "not_found"), ("GET", "/v0/topics/", "not_found"),
    ("GET", "/v0/routers/a/b", "not_found"), ("POST", "/v0/routers", "method_not_allowed"),
    ("GET", "/v0/topics/a/diff", "method_not_allowed"),
    ("PUT", "/v0/topics", "method_not_allowed"), ("PATCH", "/healthz", "method_not_allowed"),
    ("POST", "/v0/quarantine//repair", "not_found"), ("GET", "/v0/quarantine/a/repair",
                                                       "method_not_allowed"),
])
def test_route_errors(method, path, code):
    with pytest.raises(TopicsError) as caught:
        resolve(method, path)
    assert caught.value.code.wire == code


# --- API keys -------------------------------------------------------------------------------

def test_api_keys_parse_scopes_and_prefixes():
    ring = parse_api_keys(" s3cr3t-all , ro:R, w:w+DEL:a-|b-,,both:rw, pre::x-")
    keys = {k.label: k for k in ring.keys}
    assert len(keys) == 5 and ring.enabled
    assert keys["key-1"].scopes == {"read", "write", "delete", "admin"}
    assert keys["key-2"].scopes == {"read"}
    assert keys["key-3"].scopes == {"write", "delete"} and keys["key-3"].prefixes == (b"a-", b"b-")
    assert keys["key-4"].scopes == {"read", "write"}
    assert keys["key-5"].scopes == {"read", "write", "delete", "admin"}
    assert keys["key-5"].allows_name("x-1") and not keys["key-5"].allows_name("y")
    assert ring.lookup("Bearer ro") is keys["key-2"]
    assert ring.lookup("bearer  s3cr3t-all ") is keys["key-1"]
    assert ring.lookup("Bearer nope") is None and ring.lookup("ro") is None
    assert "s3cr3t" not in repr(ring)


@pytest.mark.parametrize("text", ["k:read+x", "k:q", ":r", "k:r+"])
def test_api_keys_refuse_unknown_scopes_without_echoing_secrets(text):
    with pytest.raises(KeySyntaxError) as caught:
        parse_api_keys(text)
    assert "k:" not in str(caught.value)


def test_no_keys_is_dev_mode():
    ring = parse_api_keys("")
    assert not ring.enabled and ring.authenticate(None) is None


# --- bodies, queries, append plans --------------------------------------------------------

def test_json_object_checks_content_type_then_json():
    request = HttpRequest("POST", "/", "", {"content-type": "text/plain"}, b"{}")
    with pytest.raises(TopicsError, match="JSON") as caught:
        rb.json_object(request, empty_ok=True)
    assert caught.value.code == ErrorCode.UNSUPPORTED_MEDIA_TYPE
    assert rb.json_object(HttpRequest("PUT", "/", "", {}, b""), empty_ok=True) == {}
    for body in (b"[1]", b"{", b"null"):
        with pytest.raises(TopicsError) as caught:
            rb.json_object(HttpRequest("POST", "/", "", JSON_CT, body), empty_ok=True)
        assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_query_parsing():
    params = rb.query_params("a=1&a=2&b=&c=x%20y")
    assert params == {"a": "1", "b": "", "c": "x y"}
    assert rb.query_bool({"t": "TRUE"}, "t", False) and not rb.query_bool({}, "t", False)
    assert rb.query_int({"n": "x"}, "n") is None and rb.query_int({"n": "7"}, "n") == 7
    with pytest.raises(TopicsError):
        rb.query_bool({"t": "yes"}, "t", True)


def test_append_plan_order_and_wire_form():
    with pytest.raises(TopicsError) as caught:       # no records before a long key
        parse_append("t", {"idempotency_key": "k" * 300}, None, True, "fb")
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    with pytest.raises(TopicsError) as caught:
        parse_append("t", {"records": [{"data": 1}] * 10001}, None, True, "fb")
    assert caught.value.code == ErrorCode.BATCH_TOO_LARGE
    with pytest.raises(TopicsError):
        parse_append("t", {"records": [{"data": 1}]}, "k" * 257, True, "fb")
    plan = parse_append("t", {"records": [{"data": {"a": 1}}, {"data": "x", "tag": "g",
                                                                "meta": [1]}]},
                        "hdr", False, "fb")
    assert plan.message.records == [[b'{"a":1}'], [b'"x"', "g", None, b"[1]"]]
    assert plan.message.idempotency_key == "hdr" and plan.message.return_seqs is False
    assert plan.message.prevalidated      # the shard trusts it only from its ipc socket
    assert plan.wire_bytes == 7 + 3 + 3 + 1 + 2 * 16 and plan.may_create
    assert not plan.batchable             # the client's own idempotency key
    alone = parse_append("t", {"records": [{"data": 1}]}, None, True, "fb")
    assert alone.message.idempotency_key == "fb" and alone.batchable
    assert not parse_append("t", {"records": [{"data": 1}], "config": {}}, None, True,
                            "fb").batchable
    assert not parse_append("t", {"records": [{"data": 1}], "config": {"auto_create": False}},
                            None, True, "fb").may_create
    assert parse_append("t", {"records": [{"data": 1}], "create": True,
                              "config": {"auto_create": False}}, None, True, "fb").may_create


# --- diff rendering -------------------------------------------------------------------------

def _wire(seq, data, meta=None, tag=None, node=None):
    envelope = append_envelope(orjson.dumps(data), None if meta is None else orjson.dumps(meta))
    return [seq, 1000 + seq, envelope, tag, node, meta is not None]


@pytest.mark.parametrize("data,meta", [
    (1, None), ("x", None), ({"a": ',"m":'}, None), ('"m":', {"k": ',"m":'}), (None, [1]),
    ([], {}), ("\u2603\n\"", None), (-1.5e-7, "m"),
])
def test_render_records_splices_exactly(data, meta):
    tagged = _wire(1, data, meta, tag="t", node="n\"")
    records = json.loads(render_records([tagged], include_meta=True))
    expected = {"$seq": 1, "$ts": 1001, "$node": "n\"", "$tag": "t", "data": data}
    if meta is not None:
        expected["meta"] = meta
    assert records == [expected]
    plain = json.loads(render_records([_wire(2, data, meta)], include_meta=False))
    assert plain == [{"$seq": 2, "$ts": 1002, "data": data}]


@pytest.mark.parametrize("data,meta", [
    ({"a": 1, "m": 2}, None), ({"m": 1}, {"m": 2}), ('a,"m":b', [',"m":']), ([1], {"k": 1}),
])
def test_render_records_goes_by_the_meta_flag_without_parsing(monkeypatch, data, meta):
    """The wire record's has_meta decides; an envelope is never parsed while it holds
    `,"m":` at most once (a record without meta is not even searched)."""
    def refuse(_raw):
        raise AssertionError("the envelope was parsed")
    monkeypatch.setattr(orjson, "loads", refuse)
    rendered = render_records([_wire(3, data, meta)], include_meta=True)
    monkeypatch.undo()
    expected = {"$seq": 3, "$ts": 1003, "data": data}
    assert json.loads(rendered) == [expected if meta is None else {**expected, "meta": meta}]


def test_render_records_with_nested_m_members_in_data_and_meta():
    data, meta = {"a": 1, "m": {"b": 2, "m": 3}}, {"x": 0, "m": [{"y": 1, "m": 2}]}
    assert json.loads(render_records([_wire(1, data, meta)], True))[0]["meta"] == meta
    assert json.loads(render_records([_wire(1, data, meta)], False)) == [
        {"$seq": 1, "$ts": 1001, "data": data}]


def test_render_diff_fills_performance():
    reply = {"topic": "t", "records": [_wire(1, 5)], "next_from_seq": 1, "head_seq": 1,
             "earliest_seq": 1, "caught_up": True, "tombstone": None, "lag": 0,
             "records_scanned": 1, "performance": {"server_total_ms": 9.0}}
    body = json.loads(render_diff(reply, True, 1.25))
    assert body["performance"] == {"server_total_ms": 1.25, "records_scanned": 1}
    assert list(body) == ["topic", "records", "next_from_seq", "head_seq", "earliest_seq",
                          "caught_up", "tombstone", "lag", "performance"]


# --- lists, metrics, limits -----------------------------------------------------------------

@pytest.mark.parametrize("requested,allowed,expected", [
    ("", (b"a-", b"b-"), ["a-", "b-"]), ("a", (b"a-", b"b-"), ["a-"]),
    ("a-x", (b"a-", b"b-"), ["a-x"]), ("c", (b"a-",), []), ("", (b"a", b"ab"), ["a"]),
])
def test_narrowed_prefixes(requested, allowed, expected):
    assert narrowed_prefixes(requested, allowed) == expected


def test_metrics_text_and_json():
    census = Census()
    census.add([{"topic": 'q"x', "head_seq": 3, "earliest_seq": 1, "count": 3, "bytes": 9,
                 "durability": "fsync"}])
    m = MetricsInput(census, True, 1.0, 42, {"syncs": 7})
    text = metrics_text(m).decode()
    assert 'topics_topic_head_seq{topic="q\\"x"} 3' in text
    assert 'topics_topics_by_class{class="fsync"} 1' in text
    assert "topics_wal_syncs_total 7" in text and "topics_uptime_ms 42" in text
    body = metrics_json(m)
    assert body["topics_fsync"] == 1 and body["bytes_live"] == 9 and body["wal"] == {"syncs": 7}
    assert body["queue_topics"] == 0 and "topics_topic_queue_ready{" not in text


def test_metrics_of_queues():
    census = Census()
    census.add([{"topic": "q", "head_seq": 3, "earliest_seq": 1, "count": 3, "bytes": 3,
                 "durability": "disk", "queue": {"ready": 1, "in_flight": 2,
                                                 "dead_lettered": 0}},
                {"topic": "log", "head_seq": 1, "earliest_seq": 1, "count": 1, "bytes": 1,
                 "durability": "disk"}])
    m = MetricsInput(census, True, 1.0, 42, {})
    lines = metrics_text(m).decode().splitlines()
    assert "topics_queue_topics 1" in lines and "topics_queue_leases_in_flight 2" in lines
    assert 'topics_topic_queue_ready{topic="q"} 1' in lines
    assert 'topics_topic_queue_in_flight{topic="q"} 2' in lines
    assert not any(line.startswith("topics_topic_queue_ready{topic=\"log") for line in lines)
    body = metrics_json(m)
    assert (body["queue_topics"], body["queue_leases_in_flight"]) == (1, 2)


def test_inflight_limit():
    limit = InflightLimit(1)
    with limit.admit("k"):
        with pytest.raises(TopicsError) as caught:
            with limit.admit("k"):
                pass
        assert caught.value.code == ErrorCode.THROTTLED
        with limit.admit("other"), limit.admit(None):
            pass
    assert limit.counts == {}


def test_check_bind():
    GatewaySettings().check_bind("127.0.0.1", True)
    with pytest.raises(SystemExit):
        GatewaySettings().check_bind("0.0.0.0", False)
    GatewaySettings(keys=parse_api_keys("k")).check_bind("0.0.0.0", False)
    GatewaySettings(allow_insecure_no_auth=True).check_bind("0.0.0.0", False)


def test_the_gateway_reaches_shards_on_their_ipc_endpoints():
    """On ipc the shard trusts the gateway's prevalidated appends; TCP only while the map
    has no ipc endpoint for a shard (the shard then parses the data anyway)."""
    status = {"shard_count": 2, "node_ready": True, "shards": [
        {"shard": 1, "endpoint": "tcp://h:2", "ipc": "", "incarnation": 1, "state": "ready"},
        {"shard": 0, "endpoint": "tcp://h:1", "ipc": "ipc:///run/shard-00.sock",
         "incarnation": 1, "state": "ready"}]}
    link = EngineLink("tcp://front:1")
    core = link.client._core
    core.map = ShardMap.from_status(status)
    assert [core.shard_target(s).endpoint for s in (0, 1)] == ["ipc:///run/shard-00.sock",
                                                               "tcp://h:2"]
    library = AsyncClient("tcp://front:1")._core
    library.map = core.map
    assert library.shard_target(0).endpoint == "tcp://h:1"


# --- GatewayCore against a fake engine ------------------------------------------------------

class FakeEngine:
    def __init__(self, answer=None, topics=0, ready=True):
        self.sent, self.answer, self.topics, self.ready = [], answer, topics, ready

    async def call(self, topic, msg, wait_ms=0):
        self.sent.append(msg)
        return self.answer(msg)

    async def drive(self, steps):
        """Router steps on a node of one shard with no routers; the rest goes to call()."""
        reply = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(step.msg, (ListRouters, DeleteRouters)):
                reply = [{"routers": [], "deleted": []}]
            else:
                reply = await self.call(step.topic, step.msg)

    async def node_status(self):
        return {"node_ready": self.ready, "replay_progress": 0.25}

    async def topic_count(self, max_age_s):
        return self.topics

    def topic_created(self):
        self.topics += 1

    def bytes_added(self, count):
        pass


def run(core, method, path, body=b"", headers=None, query=""):
    request = HttpRequest(method, path, query, {**JSON_CT, **(headers or {})}, body)
    response = asyncio.run(core.handle(request))
    return response.status, json.loads(response.body), dict(response.headers)


def make_core(engine, keys="", **settings):
    return GatewayCore(GatewaySettings(keys=parse_api_keys(keys), **settings), engine, 0)


def test_every_route_name_has_one_function_in_the_handler_table():
    """The route table names handlers; the gateway's table answers each name, no more."""
    core = make_core(FakeEngine())
    assert set(core.handlers) == set(handler_names()) - {UNMATCHED}
    assert all(callable(handler) for handler in core.handlers.values())


def test_auth_comes_before_routing_and_scopes_before_topics():
    core = make_core(FakeEngine(), keys="admin,ro:r:app-")
    assert run(core, "GET", "/v0/nope")[0] == 401
    assert run(core, "GET", "/v0/nope", headers={"authorization": "Bearer ro"})[0] == 404
    status, body, _ = run(core, "PUT", "/v0/topics/app-1", b"{}",
                          {"authorization": "Bearer ro"})
    assert status == 403 and body["error"]["code"] == "forbidden"
    status, body, _ = run(core, "GET", "/v0/topics/other", headers={"authorization": "Bearer ro"})
    assert status == 403 and body["error"]["detail"] == {"topic": "other"}


def test_append_without_admin_never_creates_with_a_config():
    def answer(msg):
        assert isinstance(msg, Append) and msg.create is False and msg.config is None
        raise topic_not_found(msg.topic)
    engine = FakeEngine(answer)
    core = make_core(engine, keys="w:w")
    status, body, _ = run(core, "POST", "/v0/topics/t",
                          b'{"records":[{"data":1}],"config":{"ttl_ms":5}}',
                          {"authorization": "Bearer w"})
    assert (status, body["error"]["code"], body["error"]["detail"]) == (
        403, "forbidden", {"topic": "t"})


def test_topic_cap_turns_a_create_into_429():
    def answer(msg):
        if isinstance(msg, GetTopic):
            raise topic_not_found(msg.topic)
        if isinstance(msg, Append) and msg.create is False:
            raise topic_not_found(msg.topic)
        raise AssertionError(f"unexpected {msg}")
    core = make_core(FakeEngine(answer, topics=5), topics_max=5)
    for method, path, body in (("PUT", "/v0/topics/t", b"{}"),
                               ("POST", "/v0/topics/t", b'{"records":[{"data":1}]}')):
        status, reply, headers = run(core, method, path, body)
        assert status == 429 and reply["error"]["detail"] == {"limit": "max_topics", "max": 5}
        assert headers["retry-after"] == "1"


def test_put_reports_created_and_performance():
    engine = FakeEngine(lambda msg: {"topic": msg.topic, "created": True, "config": {}})
    status, body, _ = run(make_core(engine), "PUT", "/v0/topics/t", b"")
    assert status == 201 and body["performance"] == {"server_total_ms": 0.0}
    assert isinstance(engine.sent[0], PutTopic) and engine.topics == 1


def test_errors_are_enveloped_and_bugs_are_500():
    def answer(msg):
        raise RuntimeError("boom")
    status, body, _ = run(make_core(FakeEngine(answer)), "GET", "/v0/topics/t")
    assert status == 500 and body == {"error": {"code": "internal", "message": "internal error"}}
    status, body, _ = run(make_core(FakeEngine(), body_bytes_max=4), "POST", "/v0/topics/t",
                          b'{"records":[]}')
    assert status == 413 and body["error"]["code"] == "payload_too_large"


class ParkingEngine(FakeEngine):
    """A shard that parks every diff with a wait and never wakes it; reads without a wait
    get `page`. `parked` is set once a diff parks, `cancelled` once its call is cancelled."""

    def __init__(self, page):
        super().__init__(lambda msg: page)
        self.parked, self.cancelled = asyncio.Event(), False

    async def call(self, topic, msg, wait_ms=0):
        if not msg.wait_ms:
            return await super().call(topic, msg, wait_ms)
        self.sent.append(msg)
        self.parked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


@pytest.mark.timeout(10)
def test_a_stop_answers_a_parked_long_poll_with_the_page_of_a_wait_that_ended_now():
    """A diff parked in its shard (wait_ms 20000) is answered as soon as the gateway stops,
    as if its wait ran out now: the same read without a wait, 200 with that page. A diff
    that arrives while the gateway stops does not park at all."""
    page = {"topic": "t", "records": [], "next_from_seq": 3, "head_seq": 3,
            "earliest_seq": 1, "caught_up": True, "tombstone": None, "lag": 0}
    body = b'{"from_seq": 3, "wait_ms": 20000}'

    async def scenario():
        engine = ParkingEngine(page)
        core = make_core(engine)
        request = HttpRequest("POST", "/v0/topics/t/diff", "", JSON_CT, body)
        polling = asyncio.ensure_future(core.handle(request))
        await asyncio.wait_for(engine.parked.wait(), 5)
        core.stop()
        answered = await asyncio.wait_for(polling, 5)
        late = await asyncio.wait_for(core.handle(request), 5)
        return engine, answered, late
    engine, answered, late = asyncio.run(scenario())
    for response in (answered, late):
        assert response.status == 200
        reply = json.loads(response.body)
        assert (reply["records"], reply["caught_up"], reply["next_from_seq"]) == ([], True, 3)
    assert [msg.wait_ms for msg in engine.sent] == [20000, 0, 0] and engine.cancelled


def test_ready_and_shutting_down():
    status, body, headers = run(make_core(FakeEngine(ready=False)), "GET", "/v0/ready")
    assert status == 503 and body["error"]["detail"] == {"replay_progress": 0.25}
    assert headers["retry-after"] == "1"
    core = make_core(FakeEngine())
    core.stopping = True
    status, body, _ = run(core, "GET", "/readyz")
    assert status == 503 and body["error"]["code"] == "shutting_down"


# --- recovery quarantine (gateway/quarantine_api.py) ---------------------------------------------

VERDICT = {"topic": "bad", "reason": "WAL frame fails its checks", "first_bad_seq": 5,
           "where": "wal/shard-01/wal-0000000000000001.log@700", "repairable": True,
           "would_lose": {"records": 3, "more_unknown": False}}


class QuarantineEngine(FakeEngine):
    """Two shards; shard 1 quarantined "bad" under `policy`."""

    def __init__(self, policy="park", quarantined=True, answer=None):
        super().__init__(answer)
        self.policy, self.quarantined = policy, quarantined

    async def shard_statuses(self):
        verdicts = [VERDICT] if self.quarantined else []
        return [{"shard": 0, "topics": 2, "recovery_policy": self.policy,
                 "quarantines_total": 0, "quarantine": []},
                {"shard": 1, "topics": 3, "recovery_policy": self.policy,
                 "quarantines_total": len(verdicts), "quarantine": verdicts,
                 "segments_unaudited": 7}]


def test_ready_is_degraded_under_park_and_refused_under_refuse():
    status, body, _ = run(make_core(QuarantineEngine("park")), "GET", "/v0/ready")
    assert status == 200 and body["topics"] == 5
    assert (body["degraded"], body["quarantined"]) == (True, ["bad"])
    status, body, headers = run(make_core(QuarantineEngine("refuse")), "GET", "/v0/ready")
    assert status == 503 and body["error"]["code"] == "not_ready"
    assert body["error"]["detail"] == {"quarantined": ["bad"], "recovery_policy": "refuse"}
    status, body, _ = run(make_core(QuarantineEngine("refuse", quarantined=False)), "GET",
                          "/readyz")
    assert status == 200 and (body["degraded"], body["quarantined"]) == (False, [])


def test_quarantine_listing_and_repair_need_the_admin_scope():
    def answer(msg):
        assert isinstance(msg, RepairTopic) and msg.topic == "bad"
        return {"topic": "bad", "repaired": True, "lost_records": 3, "first_bad_seq": 5}
    core = make_core(QuarantineEngine(answer=answer), keys="admin,rw:rw")
    admin, rw = {"authorization": "Bearer admin"}, {"authorization": "Bearer rw"}
    assert run(core, "GET", "/v0/quarantine", headers=rw)[0] == 403
    assert run(core, "POST", "/v0/quarantine/bad/repair", headers=rw)[0] == 403
    status, body, _ = run(core, "GET", "/v0/quarantine", headers=admin)
    assert status == 200 and body["recovery_policy"] == "park"
    assert body["quarantined"] == [{"shard": 1, **VERDICT}] and body["quarantines_total"] == 1
    assert body["segments_unaudited"] == 7
    status, body, _ = run(core, "POST", "/v0/quarantine/bad/repair", headers=admin)
    assert status == 200 and (body["repaired"], body["lost_records"]) == (True, 3)


def test_quarantined_error_is_503_without_retry_semantics():
    def answer(msg):
        raise quarantined(msg.topic, "segment seq 6: record fails its checks")
    status, body, headers = run(make_core(FakeEngine(answer)), "GET", "/v0/topics/bad")
    assert status == 503 and body["error"]["code"] == "quarantined"
    assert body["error"]["detail"]["topic"] == "bad"
    assert not ErrorCode.QUARANTINED.retryable and ErrorCode.NOT_READY.retryable


def test_metrics_count_quarantined_topics():
    m = MetricsInput(Census(), True, 1.0, 0, {}, quarantine=survey(
        asyncio.run(QuarantineEngine().shard_statuses())))
    text = metrics_text(m).decode().splitlines()
    assert "topics_recovery_quarantined 1" in text
    assert "topics_recovery_quarantines_total 1" in text
    assert metrics_json(m)["recovery_quarantined"] == 1
