"""Black-box tests of watch sessions over SSE (spec/api.md 7.1, 7.2) on a node with two
gateway processes sharing the HTTP port (so a session's POST, its stream and its reconnects
may land on different gateways).

Method: real HTTP; the stream is read with tests.support.SseReader (a raw-socket SSE client,
every read with a timeout). Liveness of wake-ups is shown with a 60 s heartbeat: a record
that arrives well before it was pushed by the shard's commit notification, not found by a
heartbeat-time read.
"""

import base64
import json
import re
import time

import pytest

from tests.http.test_http_topics import error_of
from tests.support import SseReader, wait_for

pytestmark = pytest.mark.timeout(120)

NODE_ENV = {"TOPICS_GATEWAY_WORKERS": "2", "TOPICS_TEST_MIN_HEARTBEAT_MS": "50"}
SLOW_HB = 60_000


def append(node, topic, *values, **extra):
    body = {"records": [v if isinstance(v, dict) else {"data": v} for v in values], **extra}
    reply = node.http("POST", f"/v0/topics/{topic}", body)
    assert reply.status in (200, 201), reply.body
    return reply.json()


def watch(target, topics, **options) -> dict:
    reply = target.http("POST", "/v0/watch", {"topics": topics, **options})
    assert reply.status == 200, reply.body
    return reply.json()


def stream(node, session, **headers) -> SseReader:
    reader = SseReader(node.http_port, session["stream_url"], headers)
    assert reader.status == 200, reader.body
    first = reader.next()
    assert first.retry == 2000
    return reader


def cursor_of(event) -> dict:
    raw = event.id + "=" * (-len(event.id) % 4)
    return json.loads(base64.urlsafe_b64decode(raw))


def seqs_of(events) -> list[int]:
    return [r["$seq"] for e in events if e.event == "record" for r in e.json()["records"]]


def test_create_answers_the_session_shape(node):
    append(node, "w-shape", 1, 2, 3)
    body = watch(node, {"w-shape": {"from_seq": 1}})
    assert re.fullmatch(r"wid_[A-Za-z0-9_-]{22}", body["wid"])
    assert body["stream_url"] == f"/v0/watch/{body['wid']}"
    assert body["session_ttl_ms"] == 300_000
    assert body["topics"] == {"w-shape": {"from_seq": 1, "head_seq": 3, "earliest_seq": 1}}
    assert body["performance"] == {"server_total_ms": 0.0}
    tail = watch(node, {"w-shape": {"tail": True}})
    assert tail["topics"]["w-shape"]["from_seq"] == 3
    assert tail["wid"] != body["wid"]


def test_create_errors(node):
    append(node, "w-err", 1)
    for bad in ({}, {"topics": {}}, {"topics": [1]}, {"topics": {"w-err": 5}},
                {"topics": {"w-err": {}}, "consistency": "linear"},
                {"topics": {f"t{i}": {} for i in range(257)}},
                {"topics": {"w-err": {"from_seq": -1}}}):
        error_of(node.http("POST", "/v0/watch", bad), 400, "invalid_request")
    error_of(node.http("POST", "/v0/watch", b'{"topics":{"w-err":{}}}',
                       {"Content-Type": "text/plain"}), 415, "unsupported_media_type")
    missing = node.http("POST", "/v0/watch", {"topics": {"w-err": {}, "w-absent": {}}})
    assert error_of(missing, 404, "topic_not_found")["detail"] == {"topic": "w-absent"}
    lenient = node.http("POST", "/v0/watch?lenient=true",
                        {"topics": {"w-err": {}, "w-absent": {}}})
    assert lenient.status == 200 and set(lenient.json()["topics"]) == {"w-err"}
    assert watch(node, {"w-err": {}}, consistency="strong")["wid"]
    error_of(node.http("GET", "/v0/watch"), 405, "method_not_allowed")
    error_of(node.http("POST", "/v0/watch/wid_x"), 405, "method_not_allowed")


def test_stream_errors(node):
    append(node, "w-406", 1)
    session = watch(node, {"w-406": {}})
    with SseReader(node.http_port, session["stream_url"], {"Accept": "application/json"}) as r:
        assert r.status == 406 and json.loads(r.body)["error"]["code"] == "not_acceptable"
    with SseReader(node.http_port, "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA") as r:
        assert r.status == 404 and json.loads(r.body)["error"]["code"] == "not_found"
    with SseReader(node.http_port, session["stream_url"], {"Accept": "*/*"}) as r:
        assert r.status == 200


def test_backlog_then_live_records_woken_by_the_commit(node):
    append(node, "w-live", 1, 2, 3)
    session = watch(node, {"w-live": {}}, heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        assert r.headers["content-type"] == "text/event-stream"
        assert r.headers["cache-control"] == "no-store"
        assert r.headers["x-accel-buffering"] == "no"
        record, caught = r.events(2)
        assert record.event == "record"
        assert record.json() == {**record.json(), "topic": "w-live", "from_seq": 0,
                                 "to_seq": 3, "head_seq": 3}
        assert seqs_of([record]) == [1, 2, 3] and record.json()["records"][0]["data"] == 1
        assert cursor_of(record) == {"w-live": 3}
        assert caught.event == "caught-up" and caught.json() == {"topic": "w-live",
                                                                 "head_seq": 3}
        t0 = time.monotonic()
        append(node, "w-live", {"data": {"x": 4}, "meta": {"m": 1}})
        live = r.events(1, timeout_s=5)[0]
        assert time.monotonic() - t0 < 5      # long before the 60 s heartbeat
        assert live.json()["from_seq"] == 3 and live.json()["to_seq"] == 4
        assert live.json()["records"][0]["data"] == {"x": 4}
        assert live.json()["records"][0]["meta"] == {"m": 1}
        assert cursor_of(live) == {"w-live": 4}


def test_many_topics_share_one_stream_in_name_order(node):
    append(node, "w-multi-b", 1)
    append(node, "w-multi-a", 1, 2)
    error = node.http("POST", "/v0/watch", {"topics": {"w-multi-b": {}, "w-multi-c": {}}})
    error_of(error, 404, "topic_not_found")
    session = watch(node, {"w-multi-b": {}, "w-multi-a": {}}, heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        events = r.events(4)
        assert [(e.event, e.json()["topic"]) for e in events] == [
            ("record", "w-multi-a"), ("caught-up", "w-multi-a"),
            ("record", "w-multi-b"), ("caught-up", "w-multi-b")]
        assert cursor_of(events[-1]) == {"w-multi-a": 2, "w-multi-b": 1}
        append(node, "w-multi-b", 2)
        live = r.events(1)[0]
        assert live.json()["topic"] == "w-multi-b"
        assert cursor_of(live) == {"w-multi-a": 2, "w-multi-b": 2}


def test_last_event_id_resume_misses_nothing_and_duplicates_nothing(node):
    append(node, "w-resume", *range(1, 6))
    session = watch(node, {"w-resume": {}}, limit=2, heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        events = r.events(4)     # records 1-2, 3-4, 5, caught-up
        assert seqs_of(events) == [1, 2, 3, 4, 5]
        resume_at = events[0]    # the client only "processed" seqs 1..2
        assert cursor_of(resume_at) == {"w-resume": 2}
    append(node, "w-resume", *range(6, 9))
    with stream(node, session, **{"Last-Event-ID": resume_at.id}) as r:
        events = r.events(4)     # 3-4, 5-6, 7-8, caught-up
        assert seqs_of(events) == [3, 4, 5, 6, 7, 8]
        assert events[-1].event == "caught-up"
    # without Last-Event-ID a reconnect resumes from the session's cursor (8), on
    # whichever gateway accepts it; the report of the closed stream lands shortly
    wait_for(lambda: _first_caught_up(node, session) == 8, 10, "the session cursor")
    with stream(node, session, **{"Last-Event-ID": "not-a-cursor"}) as r:
        assert r.events(1)[0].event == "caught-up"     # unparsable: ignored
        append(node, "w-resume", 9)
        assert seqs_of(r.events(2)) == [9]
    # a Last-Event-ID never moves a cursor forward
    ahead = base64.urlsafe_b64encode(b'{"w-resume":100}').rstrip(b"=").decode()
    wait_for(lambda: _first_caught_up(node, session, ahead) == 9, 10, "no skip ahead")


def _first_caught_up(node, session, last_event_id=None):
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    with stream(node, session, **headers) as r:
        events = []
        while not events or events[-1].event != "caught-up":
            events += r.events(1)
        return None if seqs_of(events) else events[-1].json()["head_seq"]


def test_heartbeats_after_silence_and_retry_first(node):
    append(node, "w-hb", 1)
    session = watch(node, {"w-hb": {"tail": True}}, heartbeat_ms=100)
    with SseReader(node.http_port, session["stream_url"]) as r:
        assert r.next().retry == 2000
        assert r.next().event == "caught-up"
        beats = []
        while len(beats) < 2:
            event = r.next(5)
            assert event.event is None and event.id is None
            beats.append(event.comment)
        assert all(re.fullmatch(r"hb \d{13}", b) for b in beats), beats
    clamped = watch(node, {"w-hb": {}}, heartbeat_ms=1)      # the floor (test hook: 50 ms)
    with SseReader(node.http_port, clamped["stream_url"]) as r:
        r.events(2)   # record, caught-up (events() skips retry and comments)
        assert r.next(5).comment.startswith("hb ")


def test_include_data_false_node_filter_and_tags(node):
    append(node, "w-opts", {"data": 1, "tag": "t1", "node": "me"},
           {"data": 2, "tag": "t2", "node": "other", "meta": {"k": 1}}, {"data": 3})
    session = watch(node, {"w-opts": {}}, include_data=False, include_tags=True, node="me",
                    heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        record, caught = r.events(2)
        assert record.json()["records"] == [
            {"$seq": 2, "$ts": record.json()["records"][0]["$ts"], "$node": "other",
             "$tag": "t2", "meta": {"k": 1}},
            {"$seq": 3, "$ts": record.json()["records"][1]["$ts"]}]
        assert record.json()["from_seq"] == 0 and record.json()["to_seq"] == 3
        append(node, "w-opts", {"data": 4, "node": "me"})    # own record: passed silently
        append(node, "w-opts", {"data": 5, "node": "x"})
        live = r.events(1)[0]
        assert seqs_of([live]) == [5] and live.json()["to_seq"] == 5
        assert live.json()["from_seq"] in (3, 4)   # 4 once the own record was passed
    all_own = watch(node, {"w-opts": {"from_seq": 3}}, node="me", include_meta=False)
    with stream(node, all_own) as r:
        first, _ = r.events(2)
        assert first.event == "record" and "meta" not in first.json()["records"][0]


def test_tombstones_first_read_relabel_then_engine_reason(node):
    assert node.http("PUT", "/v0/topics/w-cap", {"cap_records": 3}).status == 201
    append(node, "w-cap", *range(1, 6))
    session = watch(node, {"w-cap": {}}, heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        tomb, record, caught = r.events(3)
        assert tomb.event == "tombstone"
        assert tomb.json() == {"topic": "w-cap", "reason": "from_seq_too_old", "gap_from": 1,
                               "gap_to": 2, "earliest_seq": 3, "head_seq": 5}
        assert cursor_of(tomb) == {"w-cap": 2}
        assert seqs_of([record]) == [3, 4, 5] and caught.event == "caught-up"
        append(node, "w-cap", *range(6, 11))     # head 10, earliest 8: 6..7 evicted unseen
        tomb, record, caught = r.events(3)
        assert tomb.json()["reason"] == "cap"
        assert (tomb.json()["gap_from"], tomb.json()["gap_to"]) == (6, 7)
        assert seqs_of([record]) == [8, 9, 10]


def test_topic_deleted_is_terminal_and_the_stream_ends_with_the_last(node):
    append(node, "w-del-a", 1)
    append(node, "w-del-b", 1)
    session = watch(node, {"w-del-a": {}, "w-del-b": {}}, heartbeat_ms=SLOW_HB)
    with stream(node, session) as r:
        r.events(4)
        assert node.http("DELETE", "/v0/topics/w-del-a").json()["deleted"] is True
        gone = r.events(1)[0]
        assert gone.event == "topic-deleted"
        assert gone.json() == {"topic": "w-del-a", "head_seq": 0, "reason": "deleted"}
        append(node, "w-del-b", 2)
        record, caught = r.events(2)
        assert seqs_of([record]) == [2] and caught.event == "caught-up"
        node.http("DELETE", "/v0/topics/w-del-b")
        last = r.events(1)[0]
        assert (last.event, last.json()["topic"]) == ("topic-deleted", "w-del-b")
        assert r.next(10) is None       # every watched topic is gone: the stream ends


def test_streams_on_both_gateways_count_and_free_on_disconnect(node):
    append(node, "w-count", 1)
    sessions = [watch(node, {"w-count": {"tail": True}}, heartbeat_ms=SLOW_HB)
                for _ in range(6)]
    readers = [stream(node, s) for s in sessions]
    try:
        for reader in readers:
            assert reader.events(1)[0].event == "caught-up"
        metrics = node.http("GET", "/v0/metrics", headers={"Accept": "application/json"})
        assert metrics.json()["sse_connections"] >= 6
        assert metrics.json()["watch_sessions"] >= 6
        append(node, "w-count", 2)
        for reader in readers:       # one commit wakes every stream, whatever its gateway
            assert seqs_of(reader.events(2)) == [2]
    finally:
        for reader in readers:
            reader.close()
    wait_for(lambda: node.http("GET", "/v0/metrics", headers={"Accept": "application/json"})
             .json()["sse_connections"] == 0, 20, "streams freed after the disconnects")
    text = node.http("GET", "/v0/metrics").body.decode()
    assert re.search(r"^topics_watch_sessions [1-9]\d*$", text, re.M)
    assert re.search(r"^topics_sse_connections 0$", text, re.M)
