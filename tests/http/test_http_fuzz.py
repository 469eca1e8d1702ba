"""Property-based fuzz of the HTTP API (hypothesis): random methods, paths, queries,
headers and bodies (structured near-misses and arbitrary bytes). Properties: no 5xx, no
process of the node dies, and a rejected request (4xx) changes nothing: the watched topic's
state and the node's topic list are the same before and after.

TOPICS_FUZZ_EXAMPLES sets the number of cases (default 250; the long run in
docs/FAULT_TESTING.md uses 10000).
"""

import json
import os
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support import http_call


WATCHED = "fz"
EXAMPLES = int(os.environ.get("TOPICS_FUZZ_EXAMPLES", "250"))
pytestmark = pytest.mark.timeout(300 + EXAMPLES // 5)
NAMES = st.one_of(st.sampled_from([WATCHED, "fz-new", "a" * 256, ".x", "fz:ok", "fz%2Fx"]),
                  st.text(max_size=12).map(lambda t: quote(t.encode("utf-8", "replace"))))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20))
JSONS = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
FIELDS = {"records": st.one_of(JSONS, st.lists(st.fixed_dictionaries(
              {}, optional={"data": JSONS, "tag": SCALARS, "node": SCALARS, "meta": JSONS}),
              max_size=3)),
          "idempotency_key": SCALARS, "create": SCALARS, "node": SCALARS,
          "config": st.one_of(JSONS, st.fixed_dictionaries({}, optional={
              "durability": st.sampled_from(["fsync", "x", "ephemeral"]), "ttl_ms": SCALARS,
              "type": st.sampled_from(["log", "queue", "q"]), "cap_records": SCALARS})),
          "from_seq": SCALARS, "limit": SCALARS, "include_tags": SCALARS,
          "include_meta": SCALARS, "wait_ms": st.integers(-5, 30),
          "max_batch_bytes": SCALARS, "before_seq": SCALARS,
          "match": st.one_of(SCALARS, st.lists(st.sampled_from(["tag", "Eq", "Glob", "a*"]),
                                               max_size=4))}
STRUCTURED = st.fixed_dictionaries({}, optional=FIELDS).map(lambda d: json.dumps(d).encode())
VALID = st.fixed_dictionaries({"records": st.lists(st.fixed_dictionaries(
    {"data": JSONS}, optional={"tag": st.text(max_size=4)}), min_size=1, max_size=3)},
    optional={"from_seq": st.integers(0, 9), "before_seq": st.integers(0, 9),
              "match": st.sampled_from(["t1", "t*", ["tag", "Eq", "t2"]])}).map(
    lambda d: json.dumps(d).encode())
BODIES = st.one_of(VALID, STRUCTURED, JSONS.map(lambda v: json.dumps(v).encode()),
                   st.binary(max_size=64), st.just(b""))
PATHS = st.one_of(
    NAMES.map(lambda n: f"/v0/topics/{n}"), NAMES.map(lambda n: f"/v0/topics/{n}/diff"),
    NAMES.map(lambda n: f"/v0/topics/{n}/delete"),
    st.sampled_from(["/v0/topics", "/v0/health", "/readyz", "/v0/metrics", "/v0/topics/fz/x",
                     "/", "/v0//topics", "/v0/topics/fz/diff/"]),
    st.text(max_size=20).map(lambda t: "/" + quote(t.encode("utf-8", "replace"))))
QUERIES = st.one_of(st.just(""), st.lists(st.tuples(
    st.sampled_from(["touch", "if_empty", "return_seqs", "prefix", "page_size", "cursor", "x"]),
    st.text(max_size=8)), max_size=3).map(
        lambda pairs: "?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)))
ROUTED = st.tuples(st.sampled_from([
    ("POST", "/v0/topics/{}"), ("POST", "/v0/topics/{}/diff"), ("POST", "/v0/topics/{}/delete"),
    ("PUT", "/v0/topics/{}"), ("GET", "/v0/topics/{}"), ("DELETE", "/v0/topics/{}")]), NAMES
).map(lambda pair: (pair[0][0], pair[0][1].format(pair[1])))
REQUESTS = st.one_of(ROUTED, ROUTED, st.tuples(
    st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]), PATHS))
PRINTABLE = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
HEADERS = st.fixed_dictionaries({"Content-Type": st.sampled_from([
    "application/json", "application/json", "application/json; charset=utf-8", "text/plain",
    "", "application/jsonx", "APPLICATION/JSON"])}, optional={
    "Idempotency-Key": PRINTABLE, "Accept": st.sampled_from(["application/json", "*/*"]),
    "Authorization": PRINTABLE})


def state(node) -> tuple:
    reply = node.http("GET", f"/v0/topics/{WATCHED}?touch=false")
    topic = reply.json()
    fields = {k: topic[k] for k in ("head_seq", "earliest_seq", "count", "bytes", "config")
              } if reply.status == 200 else topic   # an accepted DELETE may have removed it
    names = node.http("GET", "/v0/topics?page_size=1000").json()["topics"]
    return fields, sorted(t["topic"] for t in names)


@pytest.fixture(scope="module")
def watched(node):
    node.http("POST", f"/v0/topics/{WATCHED}",
              {"records": [{"data": i, "tag": f"t{i}"} for i in range(5)]})
    return {"before": state(node), "pids": sorted(c.pid for c in node.children())}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=REQUESTS, query=QUERIES, headers=HEADERS, body=BODIES)
def test_fuzz(node, watched, request, query, headers, body):
    method, path = request
    reply = http_call(node.http_port, method, path + query,
                      body if method in ("PUT", "POST", "PATCH") else None, headers, 40)
    assert reply.status < 500, (method, path, query, headers, body, reply.body)
    # an error's body is {"error": ...}; a success may be anything (metrics are text)
    assert reply.status < 400 or not reply.body or set(json.loads(reply.body)) <= {"error"}, \
        reply.body
    if reply.status >= 400:
        assert state(node) == watched["before"], (method, path, query, body, reply.body)
    else:
        watched["before"] = state(node)
    assert sorted(c.pid for c in node.children()) == watched["pids"]
