"""Black-box tests of the TOPICS_MAX_* limits (spec/api.md 11): 413 over the body limit
(declared or chunked), 429 `throttled` with Retry-After and detail {limit, max} for the
topic cap and the live-bytes quota, and the per-key in-flight cap."""

import http.client
import threading

from tests.http.test_http_topics import error_of
from tests.support import wait_for

KEY = "limits-key"
NODE_ENV = {"TOPICS_MAX_TOPICS": "3", "TOPICS_MAX_BODY_BYTES": "4096",
            "TOPICS_MAX_TOTAL_BYTES": "3000", "TOPICS_MAX_INFLIGHT_PER_KEY": "1",
            "TOPICS_API_KEYS": f"{KEY},other-key"}
AUTH = {"Authorization": f"Bearer {KEY}"}
OTHER = {"Authorization": "Bearer other-key"}


def call(node, method, path, body=None, timeout_s=10):
    return node.http(method, path, body, AUTH, timeout_s)


def records(total_bytes: int) -> dict:
    return {"records": [{"data": "x" * (total_bytes - 2)}]}


def test_bodies_over_the_limit_are_413(node):
    big = b'{"records":[{"data":"' + b"x" * 5000 + b'"}]}'
    reply = node.http("POST", "/v0/topics/lim-a", big,
                      {**AUTH, "Content-Type": "application/json"})
    error_of(reply, 413, "payload_too_large")
    conn = http.client.HTTPConnection("127.0.0.1", node.http_port, timeout=10)
    try:
        conn.request("POST", "/v0/topics/lim-a", body=iter([big[:3000], big[3000:]]),
                     headers={**AUTH, "Content-Type": "application/json"},
                     encode_chunked=True)
        response = conn.getresponse()
        assert response.status == 413, response.read()
    finally:
        conn.close()
    error_of(call(node, "GET", "/v0/topics/lim-a"), 404, "topic_not_found")


def test_the_topic_cap_refuses_new_topics_only(node):
    for name in ("lim-a", "lim-b", "lim-c"):
        assert call(node, "PUT", f"/v0/topics/{name}", {}).status == 201
    refused = call(node, "PUT", "/v0/topics/lim-d", {})
    error = error_of(refused, 429, "throttled")
    assert error["detail"] == {"limit": "max_topics", "max": 3}
    assert refused.headers["retry-after"] == "1"
    error_of(call(node, "POST", "/v0/topics/lim-d", {"records": [{"data": 1}]}), 429,
             "throttled")
    error_of(call(node, "POST", "/v0/topics/lim-d", {"records": [{"data": 1}],
                                                    "create": False}), 404, "topic_not_found")
    error_of(call(node, "GET", "/v0/topics/lim-d"), 404, "topic_not_found")
    assert call(node, "PUT", "/v0/topics/lim-a", {"ttl_ms": 0}).status == 200
    assert call(node, "POST", "/v0/topics/lim-a", {"records": [{"data": 1}]}).status == 200


def test_the_total_bytes_quota(node):
    assert call(node, "POST", "/v0/topics/lim-b", records(2000)).status == 200
    error = error_of(call(node, "POST", "/v0/topics/lim-b", records(1500)), 429, "throttled")
    assert error["detail"] == {"limit": "max_total_bytes", "max": 3000}
    assert call(node, "GET", "/v0/topics/lim-b").json()["count"] == 1


def test_in_flight_requests_per_key(node):
    head = call(node, "GET", "/v0/topics/lim-c").json()["head_seq"]
    result = {}

    def long_poll():
        result["reply"] = call(node, "POST", "/v0/topics/lim-c/diff",
                               {"from_seq": head, "wait_ms": 20000}, timeout_s=30)
    poller = threading.Thread(target=long_poll)
    poller.start()
    try:
        client = node.client()
        wait_for(lambda: sum(s["long_polls"] for s in client.shard_statuses()) == 1, 20,
                 "the long poll to park in its shard")
        refused = call(node, "GET", "/v0/topics/lim-a")
        assert refused.status == 429 and refused.json()["error"]["code"] == "throttled"
        assert refused.headers["retry-after"] == "1"
        assert node.http("GET", "/v0/health").status == 200      # probes are not counted
        assert node.http("GET", "/v0/topics/lim-a", headers=OTHER).status == 200
    finally:
        wake = node.http("POST", "/v0/topics/lim-c", {"records": [{"data": 1}]}, OTHER)
        assert wake.status == 200
        poller.join(30)
    assert result["reply"].status == 200 and len(result["reply"].json()["records"]) == 1
