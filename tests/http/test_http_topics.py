"""Black-box tests of the topic endpoints and the conventions every route shares
(spec/api.md 1, 3, 5.1-5.4, 10) through a real node's HTTP port."""

import base64
import json

import pytest

from tests.support import http_call

CONFIG_KEYS = {"type", "ttl_ms", "cap_records", "cap_bytes", "discard", "durable", "durability",
               "priority", "auto_priority", "auto_create", "idempotency_window_ms",
               "dedupe_node", "lease_ms", "claim_jitter_ms", "max_deliveries", "dead_letter",
               "leases_durable"}
LIST_ITEM_KEYS = {"topic", "head_seq", "earliest_seq", "count", "bytes", "durable",
                  "effective_priority", "durability"}


def error_of(reply, status: int, code: str) -> dict:
    assert reply.status == status, (reply.status, reply.body)
    body = reply.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    return body["error"]


def append(target, topic, *records, **extra):
    return target.http("POST", f"/v0/topics/{topic}", {"records": list(records), **extra})


# --- section 1: conventions ---------------------------------------------------------------

def test_unknown_paths_are_404_not_found(node):
    for path in ("/nope", "/v0", "/v0/nope", "/v0/topics/", "/v0/routers/a/b",
                 "/v0/watch/a/b"):
        error_of(node.http("GET", path), 404, "not_found")


def test_known_paths_with_another_method_are_405(node):
    error_of(node.http("GET", "/v0/topics/x/diff"), 405, "method_not_allowed")
    error_of(node.http("GET", "/v0/topics/x/delete"), 405, "method_not_allowed")
    error_of(node.http("DELETE", "/v0/topics/x/delete"), 405, "method_not_allowed")
    error_of(node.http("POST", "/v0/health"), 405, "method_not_allowed")
    error_of(node.http("PATCH", "/v0/topics/x"), 405, "method_not_allowed")
    error_of(node.http("DELETE", "/v0/topics"), 405, "method_not_allowed")
    error_of(node.http("GET", "/v0/watch"), 405, "method_not_allowed")


def test_a_non_empty_body_needs_a_json_content_type(node):
    for method, path in (("PUT", "/v0/topics/ct1"), ("POST", "/v0/topics/ct1"),
                         ("POST", "/v0/topics/ct1/diff"), ("POST", "/v0/topics/ct1/delete")):
        reply = node.http(method, path, b"{}", {"Content-Type": "text/plain"})
        error_of(reply, 415, "unsupported_media_type")
        error_of(node.http(method, path, b"{}"), 415, "unsupported_media_type")
    ok = node.http("PUT", "/v0/topics/ct1", b"{}",
                   {"Content-Type": "application/json; charset=utf-8"})
    assert ok.status == 201


def test_bad_bodies_are_400_invalid_request(node):
    headers = {"Content-Type": "application/json"}
    for body in (b"{", b"[]", b"1", b'"x"', b"nul", b'{"records": 1}', b'{"records": [1]}',
                 b'{"records": [{"tag": "t"}]}', b'{"records": [{"data": 1, "tag": 5}]}'):
        error_of(node.http("POST", "/v0/topics/bad1", body, headers), 400, "invalid_request")
    error_of(node.http("POST", "/v0/topics/bad1"), 400, "invalid_request")   # empty body
    error_of(node.http("PUT", "/v0/topics/bad1", {"durability": "sometimes"}), 400,
             "invalid_request")
    error_of(node.http("PUT", "/v0/topics/bad1", {"ttl_ms": -1}), 400, "invalid_request")
    error_of(node.http("POST", "/v0/topics/bad1/diff", {"from_seq": "0"}), 400,
             "invalid_request")
    assert node.http("GET", "/v0/topics/bad1").status == 404     # nothing was created


def test_unknown_fields_are_ignored(node):
    assert node.http("PUT", "/v0/topics/extra1", {"whatever": [1, 2]}).status == 201
    assert append(node, "extra1", {"data": 1, "colour": "red"}, shiny=True).status == 200


def test_path_segments_are_percent_decoded(node):
    reply = node.http("PUT", "/v0/topics/pct%3Aname", {})
    assert reply.status == 201 and reply.json()["topic"] == "pct:name"
    assert node.http("GET", "/v0/topics/pct:name").json()["topic"] == "pct:name"


def test_topic_names_are_validated_where_topics_are_created(node):
    longest = "n" + "x" * 254
    assert node.http("PUT", f"/v0/topics/{longest}", {}).status == 201
    for bad in ("n" + "x" * 255, "-lead", ".dot", "sp%20ace", "caf%C3%A9", "a%3Eb"):
        error_of(node.http("PUT", f"/v0/topics/{bad}", {}), 400, "invalid_request")
        error_of(append(node, bad, {"data": 1}), 400, "invalid_request")
        error_of(node.http("GET", f"/v0/topics/{bad}"), 404, "topic_not_found")


# --- 5.1 PUT --------------------------------------------------------------------------------

def test_put_creates_then_replaces_the_whole_config(node):
    first = node.http("PUT", "/v0/topics/put1", {"durability": "fsync", "ttl_ms": 5000})
    assert first.status == 201
    body = first.json()
    assert body["created"] is True and set(body["config"]) == CONFIG_KEYS
    assert body["config"]["durable"] is True and body["config"]["ttl_ms"] == 5000
    assert body["performance"] == {"server_total_ms": 0.0}
    again = node.http("PUT", "/v0/topics/put1", {"cap_records": 10})
    assert again.status == 200 and again.json()["created"] is False
    config = again.json()["config"]
    assert config["ttl_ms"] == 0 and config["durability"] == "disk" and config["cap_records"] == 10
    empty = node.http("PUT", "/v0/topics/put1")       # no body = {}
    assert empty.status == 200 and empty.json()["config"]["cap_records"] == 0


def test_put_clamps_queue_knobs_and_rejects_a_type_change(node):
    reply = node.http("PUT", "/v0/topics/put2", {"lease_ms": 1, "claim_jitter_ms": 99999})
    assert reply.json()["config"]["lease_ms"] == 100
    assert reply.json()["config"]["claim_jitter_ms"] == 5000
    error = error_of(node.http("PUT", "/v0/topics/put2", {"type": "queue"}), 409,
                     "topic_exists_incompatible")
    assert error["detail"]["topic"] == "put2"
    error_of(node.http("PUT", "/v0/topics/put3", {"dead_letter": "bad name"}), 400,
             "invalid_request")
    error_of(node.http("PUT", "/v0/topics/put3", {"type": "queue", "dead_letter": "put3"}),
             400, "invalid_request")


# --- 5.2 GET --------------------------------------------------------------------------------

def test_get_reports_the_topic_state(node):
    node.http("PUT", "/v0/topics/get1", {})
    append(node, "get1", {"data": 1}, {"data": "x"})
    reply = node.http("GET", "/v0/topics/get1?touch=false")
    assert reply.status == 200
    body = reply.json()
    assert {k: body[k] for k in ("topic", "type", "head_seq", "earliest_seq", "next_seq",
                                 "count", "bytes")} == {
        "topic": "get1", "type": "log", "head_seq": 2, "earliest_seq": 1, "next_seq": 3,
        "count": 2, "bytes": 4}
    assert set(body["config"]) == CONFIG_KEYS and "queue" not in body
    assert body["last_read_ts"] is None and isinstance(body["last_write_ts"], int)
    assert isinstance(body["performance"]["server_total_ms"], float)
    touched = node.http("GET", "/v0/topics/get1").json()
    assert isinstance(touched["last_read_ts"], int) and touched["effective_priority"] == 500
    error_of(node.http("GET", "/v0/topics/get1?touch=maybe"), 400, "invalid_request")


def test_get_of_an_absent_topic_is_404_with_the_topic(node):
    error = error_of(node.http("GET", "/v0/topics/absent1"), 404, "topic_not_found")
    assert error["detail"] == {"topic": "absent1"}


# --- 5.3 list -------------------------------------------------------------------------------

def test_list_pages_by_name_with_prefix_and_cursor(node):
    names = [f"lst-{i:02d}" for i in range(7)]
    for name in reversed(names):
        node.http("PUT", f"/v0/topics/{name}", {})
    seen, cursor = [], None
    while True:
        query = "/v0/topics?prefix=lst-&page_size=3" + (f"&cursor={cursor}" if cursor else "")
        body = node.http("GET", query).json()
        assert all(set(item) == LIST_ITEM_KEYS for item in body["topics"])
        seen += [item["topic"] for item in body["topics"]]
        cursor = body.get("next_cursor")
        if not cursor:
            break
        cursor = cursor.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    assert seen == names
    assert isinstance(body["performance"]["server_total_ms"], float)


def test_list_page_size_is_clamped_and_bad_cursors_are_400(node):
    for i in range(3):
        node.http("PUT", f"/v0/topics/lsz-{i}", {})
    one = node.http("GET", "/v0/topics?prefix=lsz-&page_size=0").json()
    assert len(one["topics"]) == 1 and "next_cursor" in one
    default = node.http("GET", "/v0/topics?prefix=lsz-&page_size=lots").json()
    assert len(default["topics"]) == 3 and "next_cursor" not in default
    error_of(node.http("GET", "/v0/topics?cursor=%25%25%25"), 400, "invalid_request")
    after = base64.b64encode(json.dumps({"after": "lsz-0"}).encode()).decode()
    rest = node.http("GET", f"/v0/topics?prefix=lsz-&cursor={after.replace('=', '%3D')}")
    assert [t["topic"] for t in rest.json()["topics"]] == ["lsz-1", "lsz-2"]


# --- 5.4 DELETE -----------------------------------------------------------------------------

def test_delete_topic(node):
    absent = node.http("DELETE", "/v0/topics/del-none")
    assert absent.status == 200
    assert {k: absent.json()[k] for k in ("topic", "deleted", "routers_removed")} == {
        "topic": "del-none", "deleted": False, "routers_removed": []}
    append(node, "del1", {"data": 1}, {"data": 2})
    error = error_of(node.http("DELETE", "/v0/topics/del1?if_empty=true"), 409,
                     "topic_not_empty")
    assert error["detail"] == {"topic": "del1", "count": 2}
    gone = node.http("DELETE", "/v0/topics/del1")
    assert gone.status == 200 and gone.json()["deleted"] is True
    error_of(node.http("GET", "/v0/topics/del1"), 404, "topic_not_found")
    assert append(node, "del1", {"data": 3}).json()["seqs"] == [1]      # restarts at 1


# --- 10: probes -----------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v0/health", "/healthz"])
def test_health(node, path):
    reply = node.http("GET", path)
    body = reply.json()
    assert reply.status == 200 and body["status"] == "ok" and body["version"] == "0.1.0"
    assert isinstance(body["uptime_ms"], int) and body["uptime_ms"] >= 0


@pytest.mark.parametrize("path", ["/v0/ready", "/readyz"])
def test_ready(node, path):
    reply = node.http("GET", path)
    body = reply.json()
    assert reply.status == 200
    assert body["status"] == "ready" and body["wal_replay_complete"] is True
    assert isinstance(body["topics"], int)


def test_metrics_text_and_json(node):
    node.http("PUT", "/v0/topics/met1", {"durability": "memory"})
    append(node, "met1", {"data": "abc"})
    text = node.http("GET", "/v0/metrics")
    assert text.status == 200
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = text.body.decode().splitlines()
    for gauge in ("topics_topics", "topics_records_live", "topics_bytes_live", "topics_ready",
                  "topics_recovery_progress", "topics_uptime_ms", "topics_routers",
                  "topics_sse_connections", "topics_topic_metrics_truncated"):
        assert any(line.startswith(gauge + " ") for line in lines), gauge
    assert 'topics_topic_head_seq{topic="met1"} 1' in lines
    assert "topics_ready 1" in lines
    body = http_call(node.http_port, "GET", "/v0/metrics",
                     headers={"Accept": "application/json"}).json()
    assert body["topics_memory"] >= 1 and body["ready"] is True
    assert body["replay_progress"] == 1.0 and body["records_live"] >= 1
    assert {"topics", "topics_ephemeral", "topics_disk", "topics_fsync", "routers",
            "bytes_live", "queue_topics", "queue_leases_in_flight", "sse_connections",
            "watch_sessions", "uptime_ms"} <= set(body)
