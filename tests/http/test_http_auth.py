"""Black-box tests of API keys (spec/api.md 2): 401 without a valid key, 403 for a missing
scope or a name outside the key's prefixes (before any 404), list filtering, admin-only
creation with a config, probe auth, and that secrets never reach the log."""

import pytest

from tests.http.test_http_topics import append, error_of

KEYS = {"admin": "s3cret-admin", "reader": "s3cret-reader", "writer": "s3cret-writer",
        "deleter": "s3cret-deleter", "app": "s3cret-app", "wonly": "s3cret-wonly"}
NODE_ENV = {
    "TOPICS_API_KEYS": (f" {KEYS['admin']} , {KEYS['reader']}:r,{KEYS['writer']}:w+read,"
                        f"{KEYS['deleter']}:del,,{KEYS['app']}:rw:app-|shared-,"
                        f"{KEYS['wonly']}:w"),
    "TOPICS_PROBE_AUTH": "1",
}


def as_key(key_name):
    return {"Authorization": f"Bearer {KEYS[key_name]}"}


def call(node, key_name, method, path, body=None):
    return node.http(method, path, body, as_key(key_name) if key_name else None)


def test_missing_or_unknown_keys_are_401(node):
    for headers in (None, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                    {"Authorization": f"bearer{KEYS['admin']}"}, {"Authorization": "Bearer "}):
        for method, path in (("GET", "/v0/topics"), ("GET", "/v0/metrics"),
                             ("GET", "/v0/nope"), ("POST", "/v0/topics/x/diff")):
            error_of(node.http(method, path, None, headers), 401, "unauthorized")


def test_probes_need_a_key_with_probe_auth(node):
    error_of(node.http("GET", "/v0/health"), 401, "unauthorized")
    error_of(node.http("GET", "/readyz"), 401, "unauthorized")
    assert call(node, "deleter", "GET", "/v0/health").status == 200   # any valid key
    assert call(node, "reader", "GET", "/v0/ready").status == 200


def test_scopes_per_route(node):
    assert call(node, "admin", "PUT", "/v0/topics/auth1", {}).status == 201
    error_of(call(node, "writer", "PUT", "/v0/topics/auth1", {}), 403, "forbidden")
    error_of(call(node, "reader", "POST", "/v0/topics/auth1", {"records": [{"data": 1}]}),
             403, "forbidden")
    assert call(node, "writer", "POST", "/v0/topics/auth1",
                {"records": [{"data": 1}]}).status == 200
    error_of(call(node, "deleter", "POST", "/v0/topics/auth1/diff"), 403, "forbidden")
    assert call(node, "reader", "POST", "/v0/topics/auth1/diff").status == 200
    error_of(call(node, "deleter", "GET", "/v0/metrics"), 403, "forbidden")
    assert call(node, "reader", "GET", "/v0/metrics").status == 200
    error_of(call(node, "writer", "POST", "/v0/topics/auth1/delete", {"before_seq": 1}), 403,
             "forbidden")
    assert call(node, "deleter", "POST", "/v0/topics/auth1/delete",
                {"before_seq": 1}).status == 200
    error_of(call(node, "reader", "DELETE", "/v0/topics/auth1"), 403, "forbidden")
    assert call(node, "deleter", "DELETE", "/v0/topics/auth1").json()["deleted"] is True
    error_of(call(node, "reader", "POST", "/v0/topics/auth1/claim", {}), 403, "forbidden")


def test_queue_scopes(node):
    """As the reference's auth.rs: a claim and the `/work` stream need read and write (they
    lease jobs and hand their records out); ack, nack and extend need write alone. A
    write-only key is refused a claim but acks, nacks and extends; a read-only key does
    none of them."""
    assert call(node, "admin", "PUT", "/v0/topics/authq", {"type": "queue"}).status == 201
    assert call(node, "wonly", "POST", "/v0/topics/authq", {"records": [{"data": 1}]}).status \
        == 200
    for op in ("claim", "ack", "nack", "extend"):
        error_of(call(node, "reader", "POST", f"/v0/topics/authq/{op}",
                      {"node": "w", "seqs": [1], "lease_ms": 5000}), 403, "forbidden")
    refused = error_of(call(node, "wonly", "POST", "/v0/topics/authq/claim", {"node": "w"}),
                       403, "forbidden")
    assert "read" in refused["message"]
    error_of(node.http("GET", "/v0/topics/authq/work?node=w", None,
                       {**as_key("wonly"), "Accept": "text/event-stream"}), 403, "forbidden")
    claimed = call(node, "writer", "POST", "/v0/topics/authq/claim", {"node": "w"}).json()
    assert claimed["count"] == 1 and claimed["claimed"][0]["data"] == 1
    for op, extra, done in (("extend", {"lease_ms": 5000}, "extended"), ("ack", {}, "acked"),
                            ("nack", {}, "nacked")):
        reply = call(node, "wonly", "POST", f"/v0/topics/authq/{op}",
                     {"node": "w", "seqs": [1], **extra})
        expected = 0 if op == "nack" else 1          # the ack before it ended the lease
        assert reply.status == 200 and reply.json()[done] == expected, (op, reply.body)
    error_of(call(node, "app", "POST", "/v0/topics/authq/claim", {"node": "w"}), 403,
             "forbidden")                          # outside the key's prefixes


def test_prefixes_are_checked_before_existence(node):
    error = error_of(call(node, "app", "GET", "/v0/topics/other-1"), 403, "forbidden")
    assert error["detail"] == {"topic": "other-1"}
    error_of(call(node, "app", "POST", "/v0/topics/other-1/diff"), 403, "forbidden")
    error_of(call(node, "app", "GET", "/v0/topics/app-absent"), 404, "topic_not_found")
    assert call(node, "app", "POST", "/v0/topics/app-1", {"records": [{"data": 1}]}).status == 201


def test_lists_are_filtered_by_the_keys_prefixes(node):
    for name in ("app-a", "app-b", "shared-x", "zzz-hidden", "apple"):
        assert call(node, "admin", "PUT", f"/v0/topics/{name}", {}).status in (200, 201)
    everything = [t["topic"] for t in call(node, "admin", "GET",
                                           "/v0/topics?page_size=1000").json()["topics"]]
    assert {"zzz-hidden", "apple"} <= set(everything)
    seen, cursor = [], ""
    while True:
        page = call(node, "app", "GET", f"/v0/topics?page_size=1{cursor}").json()
        seen += [t["topic"] for t in page["topics"]]
        if "next_cursor" not in page:
            break
        cursor = "&cursor=" + page["next_cursor"].replace("=", "%3D").replace("+", "%2B")
    assert seen == sorted(n for n in everything if n.startswith(("app-", "shared-")))
    narrowed = call(node, "app", "GET", "/v0/topics?prefix=app-a").json()["topics"]
    assert [t["topic"] for t in narrowed] == ["app-a"]
    assert call(node, "app", "GET", "/v0/topics?prefix=zzz").json()["topics"] == []


def test_creating_with_a_config_needs_admin(node):
    error = error_of(call(node, "writer", "POST", "/v0/topics/cfg-new",
                          {"records": [{"data": 1}], "config": {"durability": "fsync"}}),
                     403, "forbidden")
    assert error["detail"] == {"topic": "cfg-new"}
    error_of(call(node, "admin", "GET", "/v0/topics/cfg-new"), 404, "topic_not_found")
    assert call(node, "writer", "POST", "/v0/topics/cfg-new",
                {"records": [{"data": 1}]}).status == 201      # no config: auto-create
    existing = call(node, "writer", "POST", "/v0/topics/cfg-new",
                    {"records": [{"data": 2}], "config": {"durability": "fsync"}})
    assert existing.status == 200                                 # config ignored, allowed
    no_create = call(node, "writer", "POST", "/v0/topics/cfg-none",
                     {"records": [{"data": 1}], "config": {"auto_create": False}})
    error_of(no_create, 404, "topic_not_found")
    assert call(node, "admin", "POST", "/v0/topics/cfg-adm",
                {"records": [{"data": 1}], "config": {"durability": "memory"}}).status == 201


def test_secrets_never_reach_the_log(node):
    call(node, "admin", "GET", "/v0/topics")
    node.http("GET", "/v0/topics", headers={"Authorization": "Bearer wrong-secret-xyz"})
    log = node.log()
    assert all(secret not in log for secret in KEYS.values())
    assert "wrong-secret-xyz" not in log


@pytest.mark.parametrize("keys", ["k:rwx", "k:read+fly", ":r"])
def test_bad_keys_refuse_to_start(make_node, keys):
    with pytest.raises(AssertionError, match="exited with 1"):
        make_node(env={"TOPICS_API_KEYS": keys})
