"""Black-box tests of a queue's work stream, `GET /v0/topics/:q/work` (spec/api.md 8, with
the SSE conventions of 7.2, the auth of 2 and the caps of 11): jobs leased to the stream's
node arrive as `job` frames; an append wakes the stream; `max` caps the leases the
connection holds and an ack (a plain POST, on any gateway) frees a slot; a disconnect gives
every held job back at once (claimable, deliveries kept); two streams on a queue with a
claim window; the error codes in the contract's order; `?token=`; the SSE caps (and the
gauge); the 409 `error` frame when the queue is replaced by a log; the shutdown frame.

Method: real nodes (two shards, two gateway processes sharing the port), plain HTTP, the
stream read with tests.support.SseReader (every read with a timeout). Leases are long
(60 s) wherever their running out would pass for a release. The module's node keeps the
15 s heartbeat, so a job that arrives within a second of its append was not found by a
heartbeat; that the wake is the queue's commit notification and not the 250 ms poll is
shown without sockets in tests/unit/test_work_stream.py.
"""

from __future__ import annotations

import json
import time
from unittest.mock import ANY

import pytest

from tests.http.test_http_queues import counters, ok, post, put_queue
from tests.http.test_http_topics import append, error_of
from tests.support import SseReader, wait_for

pytestmark = pytest.mark.timeout(120)

NODE_ENV = {"TOPICS_GATEWAY_WORKERS": "2"}
LONG_LEASE = "lease_ms=60000"


def work(node, queue: str, query: str, headers: dict | None = None) -> SseReader:
    reader = SseReader(node.http_port, f"/v0/topics/{queue}/work?{query}", headers)
    assert reader.status == 200, reader.body
    assert reader.next().retry == 2000
    return reader


def jobs(reader: SseReader, count: int, timeout_s: float = 10) -> list[dict]:
    events = reader.events(count, timeout_s)
    assert [e.event for e in events] == ["job"] * count, events
    for event in events:
        assert event.id == str(event.json()["$seq"])
    return [e.json() for e in events]


def nothing_more(reader: SseReader, for_s: float = 1.0) -> None:
    """No event (heartbeats aside) for `for_s`: four polls of the stream at least."""
    deadline = time.monotonic() + for_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = reader.next(left)
        except TimeoutError:
            return
        assert event is not None and event.event is None, event


def refused(node, path: str, headers: dict | None = None) -> tuple[int, dict]:
    with SseReader(node.http_port, path, headers) as reader:
        assert reader.status != 200, "the stream was admitted"
        return reader.status, json.loads(reader.body)["error"]


def test_jobs_arrive_leased_to_the_node(node):
    put_queue(node, "wq1")
    append(node, "wq1", {"data": {"job": 1}, "tag": "t", "node": "p", "meta": {"k": 1}},
           {"data": 2})
    with work(node, "wq1", f"node=w1&max=5&{LONG_LEASE}") as reader:
        assert reader.headers["content-type"] == "text/event-stream"
        assert reader.headers["cache-control"] == "no-store"
        assert reader.headers["x-accel-buffering"] == "no"
        first, second = jobs(reader, 2)
        assert list(first) == ["topic", "$seq", "lease_id", "deadline", "$ts", "$tag",
                               "deliveries", "data", "meta"]                 # no $node
        assert (first["topic"], first["$seq"], first["deliveries"]) == ("wq1", 1, 1)
        assert (first["data"], first["meta"], first["$tag"]) == ({"job": 1}, {"k": 1}, "t")
        assert first["lease_id"].startswith("lease_")
        assert first["deadline"] - first["$ts"] >= 60000 - 5000
        assert "$tag" not in second and "meta" not in second and second["data"] == 2
        assert counters(node, "wq1") == {"ready": 0, "in_flight": 2, "dead_lettered": 0}
        acked = ok(post(node, "wq1", "ack", {"node": "w1", "seqs": [1, 2],
                                             "lease_ids": [first["lease_id"],
                                                           second["lease_id"]]}))
        assert (acked["acked"], acked["acked_seqs"]) == (2, [1, 2])


def test_an_append_wakes_the_stream(node):
    put_queue(node, "wq2")
    with work(node, "wq2", f"node=w&max=10&{LONG_LEASE}") as reader:
        nothing_more(reader, 0.5)
        for n in range(3):
            sent = time.monotonic()
            append(node, "wq2", {"data": n})
            (job,) = jobs(reader, 1, timeout_s=5)
            assert job["data"] == n and job["$seq"] == n + 1
            assert time.monotonic() - sent < 1.0, "not woken by the append"


def test_max_caps_the_held_leases_and_an_ack_frees_a_slot(node):
    put_queue(node, "wq3")
    append(node, "wq3", {"data": 1}, {"data": 2}, {"data": 3}, {"data": 4})
    with work(node, "wq3", f"node=w&max=2&{LONG_LEASE}") as reader:
        first, second = jobs(reader, 2)
        nothing_more(reader)
        assert counters(node, "wq3")["ready"] == 2
        ok(post(node, "wq3", "ack", {"node": "w", "seqs": [first["$seq"]],
                                     "lease_ids": [first["lease_id"]]}))
        (third,) = jobs(reader, 1)
        assert third["$seq"] == 3
        nothing_more(reader)
        # a nack (delay 0) also frees the slot; the job comes back, delivered twice
        ok(post(node, "wq3", "nack", {"node": "w", "seqs": [second["$seq"]]}))
        (again,) = jobs(reader, 1)
        assert (again["$seq"], again["deliveries"]) == (2, 2)
        assert counters(node, "wq3") == {"ready": 1, "in_flight": 2, "dead_lettered": 0}


def test_a_disconnect_releases_the_leases_at_once(node):
    put_queue(node, "wq4")
    append(node, "wq4", {"data": 1}, {"data": 2}, {"data": 3})
    reader = work(node, "wq4", f"node=w&max=2&{LONG_LEASE}")
    held = jobs(reader, 2)
    ok(post(node, "wq4", "ack", {"node": "w", "seqs": [held[0]["$seq"]]}))
    assert jobs(reader, 1)[0]["$seq"] == 3          # the acked job no longer counts
    reader.close()
    wait_for(lambda: counters(node, "wq4") == {"ready": 2, "in_flight": 0,
                                               "dead_lettered": 0},
             10, "the stream's leases to be released")
    claimed = ok(post(node, "wq4", "claim", {"node": "other", "max": 5}))["claimed"]
    assert [(j["$seq"], j["deliveries"]) for j in claimed] == [(2, 2), (3, 2)]


def test_two_streams_on_a_queue_with_a_claim_window(node):
    """Their claims park in the queue's windows (deals within a window are the shard's,
    tests/unit/test_queue_ops.py); each stream holds its `max`, no job goes to both."""
    put_queue(node, "wq9", claim_jitter_ms=100)
    with work(node, "wq9", f"node=a&max=2&{LONG_LEASE}") as one, \
            work(node, "wq9", f"node=b&max=2&{LONG_LEASE}") as two:
        append(node, "wq9", *({"data": n} for n in range(5)))
        got = [{j["$seq"] for j in jobs(reader, 2)} for reader in (one, two)]
        assert got[0] | got[1] == {1, 2, 3, 4} and not got[0] & got[1]
        assert counters(node, "wq9") == {"ready": 1, "in_flight": 4, "dead_lettered": 0}


def test_the_error_codes_in_order(node):
    append(node, "wlog", {"data": 1})
    put_queue(node, "wq5")
    html = {"Accept": "text/html"}
    assert refused(node, "/v0/topics/absent/work", html)[1]["code"] == "not_acceptable"
    for query in ("", "?node=", "?max=2", "?node=" + "n" * 129, "?node=w&max=x"):
        status, error = refused(node, f"/v0/topics/absent/work{query}")
        assert (status, error["code"]) == (400, "invalid_request"), query
    status, error = refused(node, "/v0/topics/absent/work?node=w")
    assert (status, error["code"], error["detail"]) == (404, "topic_not_found",
                                                        {"topic": "absent"})
    status, error = refused(node, "/v0/topics/wlog/work?node=w")
    assert (status, error["code"]) == (409, "not_a_queue")
    error_of(node.http("POST", "/v0/topics/wq5/work?node=w"), 405, "method_not_allowed")
    with work(node, "wq5", "node=w", {"Accept": "text/event-stream"}):
        pass
    with work(node, "wq5", "node=w", {"Accept": "*/*"}):
        pass


def test_a_queue_replaced_by_a_log_ends_the_stream_with_an_error_frame(node):
    put_queue(node, "wq6")
    append(node, "wq6", {"data": 1})
    with work(node, "wq6", "node=w") as reader:
        jobs(reader, 1)
        assert node.http("DELETE", "/v0/topics/wq6").status == 200
        append(node, "wq6", {"data": "log"})
        error = reader.events(1)[0]
        assert error.event == "error" and error.id is None
        assert error.json() == {"code": 409, "error": "topic is no longer a queue",
                                "topic": "wq6"}
        assert reader.next(10) is None


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_keys_tokens_caps_and_heartbeats(make_node):
    node = make_node(env={"TOPICS_API_KEYS": "ka,kb,kr:r,kw:w,krw:rw,kp:rw:wp-",
                          "TOPICS_MAX_SSE_CONNECTIONS": "2",
                          "TOPICS_MAX_SSE_CONNECTIONS_PER_KEY": "1",
                          "TOPICS_TEST_MIN_HEARTBEAT_MS": "50"})
    assert node.http("PUT", "/v0/topics/wq7", {"type": "queue"}, bearer("ka")).status == 201
    path = "/v0/topics/wq7/work?node=w"
    assert refused(node, path) == (401, {"code": "unauthorized", "message": ANY})
    assert refused(node, path + "&token=nope")[1]["code"] == "unauthorized"
    assert refused(node, path, bearer("kr"))[1]["code"] == "forbidden"        # read only
    assert refused(node, path, bearer("kw"))[1]["code"] == "forbidden"        # write only
    prefix = refused(node, path, bearer("kp"))
    assert prefix[0] == 403 and prefix[1]["detail"] == {"topic": "wq7"}
    assert refused(node, "/v0/topics/wp-absent/work?node=w", bearer("kp"))[0] == 404
    first = work(node, "wq7", "node=w&token=ka")
    assert first.next(5).comment.startswith("hb")                # idle: heartbeats
    status, error = refused(node, path + "&token=ka")           # ka's one stream
    assert (status, error["code"]) == (429, "throttled")
    session = node.http("POST", "/v0/watch", {"topics": {"wq7": {}}}, bearer("kb")).json()
    watching = SseReader(node.http_port, session["stream_url"], bearer("kb"))
    assert watching.status == 200                                # the node's second
    status, error = refused(node, "/v0/topics/wq7/work?node=w", bearer("kb"))
    assert (status, error["code"]) == (429, "throttled")
    metrics = node.http("GET", "/v0/metrics", headers={**bearer("ka"),
                                                        "Accept": "application/json"})
    assert metrics.json()["sse_connections"] == 2              # a work and a watch stream
    first.close()
    watching.close()
    wait_for(lambda: _admitted(node, path + "&token=ka"), 20, "the freed slots")
    wait_for(lambda: _admitted(node, path + "&token=krw"), 20, "a read-write worker's stream")


def _admitted(node, path: str) -> bool:
    with SseReader(node.http_port, path) as reader:
        return reader.status == 200


def test_a_stopping_node_ends_work_streams_with_an_error_frame(make_node):
    node = make_node()
    put_queue(node, "wq8")
    with work(node, "wq8", "node=w") as reader:
        node.proc.terminate()
        error = reader.events(1)[0]
        assert error.event == "error" and error.json()["code"] == "server_shutting_down"
        assert reader.next(10) is None
    node.proc.wait(30)
