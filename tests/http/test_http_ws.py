"""Black-box tests of `GET /v0/ws` (spec/api.md 7.3) on a node with two gateway processes:
every client op and its reply, the server pushes of a subscription (record, caught_up,
tombstone without relabel, topic_deleted), resuming by from_seq, many topics on one socket,
and every in-socket error code.

Method: a real WebSocket client (the `websockets` package, its synchronous API; every
receive has a timeout). The WebSocket heartbeat is the default 15 s here, so a record that
arrives within RECV_S was pushed by the shard's commit notification, not found by a
heartbeat-time read. Auth, caps and shutdown are in test_http_ws_limits.py.
"""

import json

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

pytestmark = pytest.mark.timeout(120)

NODE_ENV = {"TOPICS_GATEWAY_WORKERS": "2"}
RECV_S = 5.0


class Socket:
    """A WebSocket client on the node's /v0/ws: JSON ops out, JSON frames in."""

    def __init__(self, node, headers: dict | None = None, path: str = "/v0/ws"):
        self.ws = connect(f"ws://127.0.0.1:{node.http_port}{path}",
                          additional_headers=headers, open_timeout=10, close_timeout=2)
        self.ws.__enter__()         # the context-manager form (websockets >= 17.1)

    def send(self, **op) -> None:
        self.ws.send(json.dumps(op))

    def recv(self, timeout_s: float = RECV_S) -> dict:
        return json.loads(self.ws.recv(timeout=timeout_s))

    def frames(self, count: int, timeout_s: float = RECV_S) -> list[dict]:
        return [self.recv(timeout_s) for _ in range(count)]

    def call(self, **op) -> dict:
        self.send(**op)
        return self.recv()

    def quiet(self, wait_s: float = 0.5) -> bool:
        """True when nothing arrives within `wait_s`."""
        try:
            frame = self.ws.recv(timeout=wait_s)
        except TimeoutError:
            return True
        raise AssertionError(f"unexpected frame {frame}")

    def close(self) -> None:
        self.ws.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def append(node, topic, *values, **extra) -> dict:
    body = {"records": [v if isinstance(v, dict) else {"data": v} for v in values], **extra}
    reply = node.http("POST", f"/v0/topics/{topic}", body)
    assert reply.status in (200, 201), reply.body
    return reply.json()


def data_of(frame: dict) -> list:
    return [r["data"] for r in frame["records"]]


def upgrade_status(node, path: str = "/v0/ws", headers: dict | None = None) -> int:
    try:
        Socket(node, headers, path).close()
    except InvalidStatus as refused:
        return refused.response.status_code
    return 101


def test_ping_echoes_any_request_id(node):
    with Socket(node) as s:
        for request_id in (7, "r-1", {"a": [1, None]}, [1, 2], 1.5, None):
            assert s.call(op="ping", request_id=request_id) == {"op": "pong",
                                                                "request_id": request_id}
        assert s.call(op="ping") == {"op": "pong", "request_id": None}


def test_publish_acks_like_an_append(node):
    with Socket(node) as s:
        ack = s.call(op="publish", request_id="p1", topic="ws-pub",
                     records=[{"data": {"x": 1}}, {"data": 2, "tag": "t"}])
        assert ack["op"] == "ack" and ack["request_id"] == "p1"
        assert (ack["topic"], ack["first_seq"], ack["last_seq"], ack["seqs"]) == (
            "ws-pub", 1, 2, [1, 2])
        assert (ack["head_seq"], ack["count"], ack["created"], ack["deduped"]) == (
            2, 2, True, False)
        assert set(ack["performance"]) >= {"server_total_ms", "wal_append_ms", "fsync_ms"}
        ack = s.call(op="publish", topic="ws-pub", records=[{"data": 3}], return_seqs=False,
                     idempotency_key="k1")
        assert ack["seqs"] is None and ack["first_seq"] == 3 and ack["created"] is False
        again = s.call(op="publish", topic="ws-pub", records=[{"data": 4}],
                       idempotency_key="k1")
        assert again["deduped"] is True and again["first_seq"] == 3
    diff = node.http("POST", "/v0/topics/ws-pub/diff", {"include_tags": True}).json()
    assert [(r["$seq"], r["data"], r.get("$tag")) for r in diff["records"]] == [
        (1, {"x": 1}, None), (2, 2, "t"), (3, 3, None)]


def test_publish_errors_carry_the_engine_codes(node):
    with Socket(node) as s:
        error = s.call(op="publish", request_id=1, topic="ws-absent", records=[{"data": 1}],
                       create=False)
        assert error == {"op": "error", "request_id": 1, "code": "topic_not_found",
                         "message": error["message"], "detail": {"topic": "ws-absent"}}
        assert s.call(op="publish", request_id=2, topic="ws-e", records=[])["code"] == \
            "invalid_request"
        too_many = s.call(op="publish", request_id=3, topic="ws-e",
                          records=[{"data": 0}] * 10001)
        assert (too_many["code"], too_many["request_id"]) == ("batch_too_large", 3)
        assert s.call(op="publish", topic="bad name!", records=[{"data": 1}])["code"] == \
            "invalid_request"
        assert s.call(op="ping", request_id="alive")["op"] == "pong"   # still open
    assert node.http("GET", "/v0/topics/ws-absent").status == 404     # nothing created


def test_subscribe_sends_the_backlog_then_live_records(node):
    append(node, "ws-sub", 1, 2, 3)
    with Socket(node) as s:
        reply = s.call(op="subscribe", request_id="s", topic="ws-sub", from_seq=1)
        assert reply == {"op": "subscribed", "request_id": "s",
                         "topics": {"ws-sub": {"from_seq": 1, "head_seq": 3,
                                               "earliest_seq": 1}}}
        record, caught = s.frames(2)
        assert record["op"] == "record" and data_of(record) == [2, 3]
        assert (record["topic"], record["from_seq"], record["to_seq"], record["head_seq"]) \
            == ("ws-sub", 1, 3, 3)
        assert [r["$seq"] for r in record["records"]] == [2, 3]
        assert caught == {"op": "caught_up", "topic": "ws-sub", "head_seq": 3}
        append(node, "ws-sub", 4)                 # from HTTP, through the commit feed
        record = s.recv()
        assert (data_of(record), record["from_seq"], record["to_seq"]) == ([4], 3, 4)
        assert s.recv() == {"op": "caught_up", "topic": "ws-sub", "head_seq": 4}
        ack = s.call(op="publish", topic="ws-sub", records=[{"data": 5}])
        pushed = [ack] + s.frames(2)              # the ack and the push may come either way
        assert sorted(f["op"] for f in pushed) == ["ack", "caught_up", "record"]
        assert [data_of(f) for f in pushed if f["op"] == "record"] == [[5]]


def test_tail_resume_and_read_options(node):
    append(node, "ws-opt", {"data": 1, "meta": {"m": 1}, "tag": "a", "node": "me"},
           {"data": 2, "node": "other"}, 3)
    with Socket(node) as s:
        assert s.call(op="subscribe", topic="ws-opt", tail=True)["topics"]["ws-opt"][
            "from_seq"] == 3
        assert s.recv() == {"op": "caught_up", "topic": "ws-opt", "head_seq": 3}
        assert s.quiet()
    with Socket(node) as s:                        # resume where a record frame ended
        s.call(op="subscribe", topic="ws-opt", from_seq=0, limit=1, include_tags=True,
               include_meta=False, node="me")
        first = s.recv()
        assert first["records"] == [{"$seq": 2, "$ts": first["records"][0]["$ts"],
                                     "$node": "other", "data": 2}]
        assert (first["from_seq"], first["to_seq"]) == (0, 2)   # own record 1 passed over
        assert data_of(s.recv()) == [3]
        assert s.recv()["op"] == "caught_up"
    with Socket(node) as s:
        s.call(op="subscribe", topic="ws-opt", from_seq=2, include_data=False)
        record = s.recv()
        assert [sorted(r) for r in record["records"]] == [["$seq", "$ts"]]


def test_many_topics_on_one_socket_and_unsubscribe(node):
    names = [f"ws-many-{i:02d}" for i in range(40)]
    for i, name in enumerate(names):
        append(node, name, i)
    with Socket(node) as s:
        reply = s.call(op="subscribe", request_id=9,
                       topics={name: {"from_seq": 0} for name in names})
        assert sorted(reply["topics"]) == names
        frames = s.frames(80)
        got = {f["topic"]: data_of(f) for f in frames if f["op"] == "record"}
        assert got == {name: [i] for i, name in enumerate(names)}
        assert sum(f["op"] == "caught_up" for f in frames) == 40
        gone = s.call(op="unsubscribe", request_id="u", topics=names[:39] + ["ws-never"])
        assert gone == {"op": "unsubscribed", "request_id": "u", "topics": names[:39]}
        append(node, names[0], "after")           # no longer subscribed: nothing comes
        append(node, names[39], "live")
        assert data_of(s.recv()) == ["live"]
        assert s.recv()["op"] == "caught_up"
        assert s.call(op="unsubscribe", topic=names[39])["topics"] == [names[39]]
        append(node, names[39], "late")
        assert s.quiet()


def test_subscribe_unknown_topics(node):
    append(node, "ws-known", 1)
    with Socket(node) as s:
        error = s.call(op="subscribe", request_id=[1], topics={"ws-known": {},
                                                               "ws-unknown": {}})
        assert (error["op"], error["code"], error["request_id"]) == ("error",
                                                                     "topic_not_found", [1])
        assert s.quiet()                            # nothing was subscribed
        reply = s.call(op="subscribe", topics={"ws-known": {}, "ws-unknown": {}},
                       lenient=True)
        assert list(reply["topics"]) == ["ws-known"]
        assert data_of(s.recv()) == [1]


def test_tombstones_keep_the_engine_reason(node):
    assert node.http("PUT", "/v0/topics/ws-cap", {"cap_records": 3}).status == 201
    append(node, "ws-cap", *range(1, 6))
    with Socket(node) as s:
        s.call(op="subscribe", topic="ws-cap")
        tomb, record, caught = s.frames(3)
        assert tomb == {"op": "tombstone", "topic": "ws-cap", "reason": "cap", "gap_from": 1,
                        "gap_to": 2, "earliest_seq": 3, "head_seq": 5}
        assert data_of(record) == [3, 4, 5] and caught["op"] == "caught_up"
        append(node, "ws-cap", *range(6, 11))      # one commit: 6..7 evicted unseen
        tomb, record, caught = s.frames(3)
        assert (tomb["reason"], tomb["gap_from"], tomb["gap_to"]) == ("cap", 6, 7)
        assert data_of(record) == [8, 9, 10] and record["from_seq"] == 5   # the page's cursor
        assert caught == {"op": "caught_up", "topic": "ws-cap", "head_seq": 10}


def test_topic_deletion_ends_that_topic_only(node):
    append(node, "ws-del-a", 1)
    append(node, "ws-del-b", 1)
    with Socket(node) as s:
        s.call(op="subscribe", topics={"ws-del-a": {}, "ws-del-b": {}})
        s.frames(4)
        assert node.http("DELETE", "/v0/topics/ws-del-a").json()["deleted"] is True
        assert s.recv() == {"op": "topic_deleted", "topic": "ws-del-a", "head_seq": 0,
                            "reason": "deleted"}
        append(node, "ws-del-a", "recreated")      # no longer subscribed
        append(node, "ws-del-b", 2)
        assert data_of(s.recv()) == [2]
        assert s.recv()["op"] == "caught_up"
        assert s.quiet()


def test_bad_frames_get_error_frames_and_the_socket_stays(node):
    with Socket(node) as s:
        s.ws.send(b"\x00binary")
        assert s.recv() == {"op": "error", "request_id": None, "code": "unsupported_message",
                            "message": "only JSON text frames are accepted"}
        for frame in ("{not json", '{"op": "ping", "request_id": 1e999}', ""):
            s.ws.send(frame)
            error = s.recv()
            assert (error["code"], error["request_id"]) == ("invalid_json", None), frame
        for frame, request_id in (("[1, 2]", None), ('{"op": "nope", "request_id": 5}', 5),
                                  ('{"request_id": "x"}', "x"),
                                  ('{"op": "subscribe", "request_id": 6}', 6),
                                  ('{"op": "subscribe", "topic": "a", "topics": {}}', None),
                                  ('{"op": "subscribe", "topic": "a", "limit": -1}', None),
                                  ('{"op": "unsubscribe", "topics": "a"}', None),
                                  ('{"op": "publish", "records": []}', None),
                                  ('{"op": "ping", "n": 123456789012345678901234}', None)):
            s.ws.send(frame)
            error = s.recv()
            assert (error["op"], error["code"], error["request_id"]) == (
                "error", "invalid_request", request_id), frame
        assert s.call(op="ping", request_id="ok") == {"op": "pong", "request_id": "ok"}


def test_only_the_upgrade_of_v0_ws_is_served(node):
    assert upgrade_status(node, "/v0/topics/x") == 404
    assert upgrade_status(node, "/v0/wsx") == 404
    plain = node.http("GET", "/v0/ws")
    assert plain.status == 400 and plain.json()["error"]["code"] == "invalid_request"
    assert node.http("POST", "/v0/ws").status == 405
