"""Black-box tests of watch sessions with API keys and caps (spec/api.md 2, 7.2, 11): the
session is bound to the key that created it (header or `?token=`), scope and prefix checks
precede existence, TOPICS_MAX_WATCH_SESSIONS / TOPICS_MAX_SSE_CONNECTIONS / its per-key
variant answer 429, a closed stream frees its slot, and a stopping node ends its streams
with `event: error` {"code": "server_shutting_down"}."""

import json

import pytest

from tests.http.test_http_topics import error_of
from tests.support import SseReader, wait_for

pytestmark = pytest.mark.timeout(120)

NODE_ENV = {"TOPICS_API_KEYS": "wkey,wother,wwrite:w,wpre:r:wa-",
            "TOPICS_TEST_MIN_HEARTBEAT_MS": "50"}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def create(node, key: str, topics: dict, **options):
    return node.http("POST", "/v0/watch", {"topics": topics, **options}, bearer(key))


def open_status(node, url: str, headers: dict | None = None) -> tuple[int, dict | None]:
    with SseReader(node.http_port, url, headers) as reader:
        if reader.status != 200:
            return reader.status, json.loads(reader.body)["error"]
        assert reader.next().retry == 2000
        return 200, None


def test_the_creating_key_owns_the_session(node):
    assert node.http("POST", "/v0/topics/wa-1", {"records": [{"data": 1}]},
                     bearer("wkey")).status == 201
    error_of(node.http("POST", "/v0/watch", {"topics": {"wa-1": {}}}), 401, "unauthorized")
    error_of(create(node, "nope", {"wa-1": {}}), 401, "unauthorized")
    error_of(create(node, "wwrite", {"wa-1": {}}), 403, "forbidden")
    forbidden = error_of(create(node, "wpre", {"wa-1": {}, "wb-absent": {}}), 403,
                         "forbidden")
    assert forbidden["detail"] == {"topic": "wb-absent"}         # 403 before 404
    error_of(create(node, "wpre", {"wa-absent": {}}), 404, "topic_not_found")
    session = create(node, "wpre", {"wa-1": {}}).json()
    url = session["stream_url"]
    assert open_status(node, url)[0] == 401                      # no key
    assert open_status(node, url, bearer("nope"))[0] == 401      # an invalid key
    status, error = open_status(node, url, bearer("wother"))     # another valid key
    assert status == 401 and error["code"] == "unauthorized"
    assert open_status(node, f"{url}?token=wother")[0] == 401
    assert open_status(node, url, bearer("wpre"))[0] == 200
    assert open_status(node, f"{url}?token=wpre")[0] == 200
    assert open_status(node, "/v0/watch/wid_AAAAAAAAAAAAAAAAAAAAAA")[0] == 404
    with SseReader(node.http_port, url, {**bearer("wpre"), "Accept": "text/html"}) as r:
        assert r.status == 406


def _stream(node, session, key):
    reader = SseReader(node.http_port, session["stream_url"], bearer(key))
    return reader


def test_session_and_sse_caps(make_node):
    node = make_node(env={"TOPICS_API_KEYS": "ka,kb", "TOPICS_MAX_WATCH_SESSIONS": "3",
                          "TOPICS_MAX_SSE_CONNECTIONS": "2",
                          "TOPICS_MAX_SSE_CONNECTIONS_PER_KEY": "1"})
    node.http("POST", "/v0/topics/cap-t", {"records": [{"data": 1}]}, bearer("ka"))
    sessions = [create(node, k, {"cap-t": {}}).json() for k in ("ka", "ka", "kb")]
    refused = create(node, "kb", {"cap-t": {}})
    assert error_of(refused, 429, "throttled")["detail"] == {"limit": "max_watch_sessions",
                                                              "max": 3}
    assert refused.headers["retry-after"] == "1"
    first = _stream(node, sessions[0], "ka")
    assert first.status == 200
    per_key = _stream(node, sessions[1], "ka")
    assert per_key.status == 429 and json.loads(per_key.body)["error"]["code"] == "throttled"
    assert per_key.headers["retry-after"] == "1"
    other = _stream(node, sessions[2], "kb")
    assert other.status == 200
    first.close()          # frees ka's slot once the stream's end reaches the session

    def admitted():
        # The stream that gets in is kept: a probe closed right away would hold the slot
        # until its own end is noticed, and the next open would race it.
        reader = _stream(node, sessions[1], "ka")
        if reader.status == 200:
            return reader
        reader.close()
        return None
    second = wait_for(admitted, 20, "the freed per-key slot")
    extra = _stream(node, sessions[2], "kb")          # kb's own cap and the node's total
    assert extra.status == 429
    metrics = node.http("GET", "/v0/metrics", headers={**bearer("ka"),
                                                        "Accept": "application/json"})
    assert metrics.json()["sse_connections"] == 2 and metrics.json()["watch_sessions"] == 3
    for reader in (per_key, other, second, extra):
        reader.close()


def test_a_stopping_node_ends_its_streams_with_an_error_frame(make_node):
    node = make_node(env={"TOPICS_GATEWAY_WORKERS": "2"})
    node.http("POST", "/v0/topics/stop-t", {"records": [{"data": 1}]})
    session = node.http("POST", "/v0/watch", {"topics": {"stop-t": {}},
                                             "heartbeat_ms": 60_000}).json()
    with SseReader(node.http_port, session["stream_url"]) as reader:
        assert [e.event for e in reader.events(2)] == ["record", "caught-up"]
        node.proc.terminate()
        error = reader.events(1)[0]
        assert error.event == "error" and error.json()["code"] == "server_shutting_down"
        assert isinstance(error.json()["message"], str) and error.id
        assert reader.next(10) is None
    node.proc.wait(30)


def test_streams_survive_a_topic_shard_restart_and_sessions_die_with_theirs(make_node):
    import os
    import signal

    from topics_actors.topic_identity import shard_of_name
    node = make_node(env={"TOPICS_TEST_MIN_HEARTBEAT_MS": "50"})
    topics = {shard_of_name(f"rs-{i}", 2): f"rs-{i}" for i in range(20)}
    for name in topics.values():
        node.http("POST", f"/v0/topics/{name}", {"records": [{"data": 0}]})
    sessions = [node.http("POST", "/v0/watch", {"topics": {topics[0]: {}, topics[1]: {}},
                                                "heartbeat_ms": 1000}).json()
                for _ in range(12)]
    by_shard = {shard_of_name(s["wid"], 2): s for s in sessions}
    assert set(by_shard) == {0, 1}, "12 random wids all on one shard"
    survivor, lost = by_shard[0], by_shard[1]
    with SseReader(node.http_port, survivor["stream_url"]) as reader:
        assert [e.event for e in reader.events(4)] == ["record", "caught-up"] * 2
        pid = node.shard_pid(1)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: node.status()["shards"][1]["state"] == "ready"
                 and node.shard_pid(1) != pid, 30, "the shard's restart")
        for seq, name in ((1, topics[1]), (1, topics[0])):
            reply = node.http("POST", f"/v0/topics/{name}", {"records": [{"data": seq}]})
            assert reply.status == 200, reply.body
        got = {}
        while len(got) < 2:
            event = reader.events(1, timeout_s=15)[0]
            if event.event == "record":
                got[event.json()["topic"]] = [r["data"] for r in event.json()["records"]]
        assert got == {topics[0]: [1], topics[1]: [1]}
    assert open_status(node, survivor["stream_url"])[0] == 200
    assert open_status(node, lost["stream_url"])[0] == 404      # memory only
