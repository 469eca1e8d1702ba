"""Black-box tests of `GET /v0/ws` with API keys, caps and shutdown (spec/api.md 2, 7.3):
the upgrade needs a valid key in `Authorization` (401 before the upgrade), each operation
its scope and the topic's prefix (an `error` frame `forbidden`, the socket stays), the
sockets count against TOPICS_MAX_SSE_CONNECTIONS and its per-key variant together with
the SSE streams (429 before the upgrade; a closed socket frees its slot) and in
`topics_sse_connections`, a frame over TOPICS_MAX_BODY_BYTES is refused, and a stopping
gateway sends `server_shutting_down`, then closes.

Method: a real WebSocket client (tests/http/test_http_ws.py's Socket, every receive with a
timeout); SSE streams with tests.support.SseReader.
"""

import pytest
from websockets.exceptions import ConnectionClosed

from tests.http.test_http_ws import Socket, upgrade_status
from tests.support import SseReader, wait_for

pytestmark = pytest.mark.timeout(120)

NODE_ENV = {"TOPICS_API_KEYS": "wall,wro:r,wwo:w,wrw:rw:wsa-,wadm:rw+a:wsa-",
            "TOPICS_MAX_BODY_BYTES": "4096"}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_the_upgrade_needs_a_valid_key(node):
    assert upgrade_status(node) == 401
    assert upgrade_status(node, headers=bearer("nope")) == 401
    assert upgrade_status(node, "/v0/ws?token=wall") == 401     # the header only
    assert upgrade_status(node, "/v0/nothing") == 401            # 401 before 404
    assert upgrade_status(node, headers=bearer("wall")) == 101
    assert upgrade_status(node, headers=bearer("wwo")) == 101    # scopes are per op


def test_each_operation_needs_its_scope_and_prefix(node):
    with Socket(node, bearer("wall")) as admin:
        assert admin.call(op="publish", topic="wsa-1", records=[{"data": 1}])["op"] == "ack"
        assert admin.call(op="publish", topic="wsb-1", records=[{"data": 1}])["op"] == "ack"
    with Socket(node, bearer("wro")) as s:
        error = s.call(op="publish", request_id=1, topic="wsa-1", records=[{"data": 2}])
        assert (error["op"], error["code"], error["request_id"]) == ("error", "forbidden", 1)
        assert s.call(op="subscribe", topic="wsa-1")["op"] == "subscribed"
        assert s.recv()["op"] == "record"
    with Socket(node, bearer("wwo")) as s:
        assert s.call(op="subscribe", topic="wsa-1")["code"] == "forbidden"
        assert s.call(op="publish", topic="wsa-1", records=[{"data": 3}])["first_seq"] == 2
    with Socket(node, bearer("wrw")) as s:
        error = s.call(op="subscribe", request_id="x",
                       topics={"wsa-1": {}, "wsb-1": {}, "wsb-absent": {}})
        assert (error["code"], error["detail"]) == ("forbidden", {"topic": "wsb-1"})
        assert s.call(op="publish", topic="wsb-1", records=[{"data": 1}])["code"] == \
            "forbidden"
        created = s.call(op="publish", topic="wsa-new", records=[{"data": 1}],
                         config={"cap_records": 5})
        assert created["code"] == "forbidden"                    # config needs admin
        assert s.call(op="ping")["op"] == "pong"
    assert node.http("GET", "/v0/topics/wsa-new", headers=bearer("wall")).status == 404
    with Socket(node, bearer("wadm")) as s:
        created = s.call(op="publish", topic="wsa-new", records=[{"data": 1}],
                         config={"cap_records": 5})
        assert created["created"] is True
    state = node.http("GET", "/v0/topics/wsa-new", headers=bearer("wall")).json()
    assert state["config"]["cap_records"] == 5
    assert node.http("GET", "/v0/topics/wsb-1/diff", headers=bearer("wall")).status == 405
    diff = node.http("POST", "/v0/topics/wsb-1/diff", {}, bearer("wall")).json()
    assert [r["data"] for r in diff["records"]] == [1]          # nothing from wro / wrw


def test_a_frame_over_the_body_limit_is_refused(node):
    with Socket(node, bearer("wall")) as s:
        s.send(op="publish", request_id="big", topic="wsa-big",
               records=[{"data": "x" * 4096}])
        error = s.recv()
        assert (error["code"], error["request_id"], error["detail"]) == (
            "payload_too_large", None, {"max": 4096})      # refused before it is parsed
        assert s.call(op="publish", topic="wsa-big", records=[{"data": "x" * 4000}])[
            "op"] == "ack"
    assert node.http("GET", "/v0/topics/wsa-big", headers=bearer("wall")).json()[
        "count"] == 1


def _metrics(node, key: str) -> dict:
    return node.http("GET", "/v0/metrics", headers={**bearer(key),
                                                     "Accept": "application/json"}).json()


def test_sockets_count_against_the_sse_caps(make_node):
    node = make_node(env={"TOPICS_API_KEYS": "ka,kb", "TOPICS_MAX_SSE_CONNECTIONS": "2",
                          "TOPICS_MAX_SSE_CONNECTIONS_PER_KEY": "1"})
    node.http("POST", "/v0/topics/cap-t", {"records": [{"data": 1}]}, bearer("ka"))
    first = Socket(node, bearer("ka"))
    assert upgrade_status(node, headers=bearer("ka")) == 429      # ka's own cap
    session = node.http("POST", "/v0/watch", {"topics": {"cap-t": {}}}, bearer("kb")).json()
    with SseReader(node.http_port, session["stream_url"], bearer("kb")) as sse:
        assert sse.status == 200
        assert upgrade_status(node, headers=bearer("kb")) == 429  # the node's total (and kb's)
        assert _metrics(node, "ka")["sse_connections"] == 2
    wait_for(lambda: _metrics(node, "ka")["sse_connections"] == 1, 20, "the SSE slot freed")
    first.close()
    wait_for(lambda: upgrade_status(node, headers=bearer("ka")) == 101, 20,
             "the socket's slot freed")
    wait_for(lambda: _metrics(node, "ka")["sse_connections"] == 0, 20, "every slot freed")
    requests = _metrics(node, "ka")["http"]["requests"]["websocket"]
    assert requests["1xx"] >= 2 and requests["4xx"] == 2


def test_a_stopping_node_ends_its_sockets_with_an_error_frame(make_node):
    node = make_node(env={"TOPICS_GATEWAY_WORKERS": "2"})
    node.http("POST", "/v0/topics/stop-ws", {"records": [{"data": 1}]})
    sockets = [Socket(node) for _ in range(3)]
    for s in sockets:
        s.call(op="subscribe", topic="stop-ws")
        assert [f["op"] for f in s.frames(2)] == ["record", "caught_up"]
    node.proc.terminate()
    for s in sockets:
        error = s.recv(10)
        assert error == {"op": "error", "request_id": None, "code": "server_shutting_down",
                         "message": error["message"]}
        with pytest.raises(ConnectionClosed):
            s.recv(10)
        s.close()
    node.proc.wait(30)
