"""Black-box tests of queues over HTTP (spec/api.md 8): claim, ack, nack, extend, fencing,
redelivery after the visibility timeout, dead letters, the `queue` counters of a GET, a
side-effect-free diff, and every error code of the section with its detail.

Method: one real node (two shards) per module, driven with plain HTTP. Timeouts use the
smallest lease (100 ms) and wait_for on the condition, never a bare sleep.
"""

from __future__ import annotations

import concurrent.futures

from tests.http.test_http_topics import append, error_of
from tests.support import wait_for
from topics_actors.topic_identity import shard_of_name


def put_queue(node, name, **config):
    reply = node.http("PUT", f"/v0/topics/{name}", {"type": "queue", **config})
    assert reply.status in (200, 201), reply.body
    return reply.json()


def post(node, name, op, body):
    return node.http("POST", f"/v0/topics/{name}/{op}", body)


def ok(reply) -> dict:
    assert reply.status == 200, reply.body
    return reply.json()


def counters(node, name) -> dict:
    return ok(node.http("GET", f"/v0/topics/{name}?touch=false"))["queue"]


def test_claim_ack_cycle(node):
    put_queue(node, "hq1")
    append(node, "hq1", {"data": {"job": 1}, "tag": "t", "node": "p", "meta": {"k": 1}},
           {"data": 2})
    body = ok(post(node, "hq1", "claim", {"node": "w1", "max": 5, "lease_ms": 60000}))
    assert body["topic"] == "hq1" and body["count"] == 2 and body["ready"] == 0
    first, second = body["claimed"]
    assert list(first) == ["$seq", "lease_id", "deadline", "$ts", "$tag", "deliveries",
                           "data", "meta"]                       # no $node
    assert (first["$seq"], first["lease_id"], first["deliveries"]) == (1, "lease_1", 1)
    assert (first["data"], first["meta"], first["$tag"]) == ({"job": 1}, {"k": 1}, "t")
    assert "$tag" not in second and "meta" not in second and second["data"] == 2
    assert first["deadline"] - first["$ts"] >= 60000 - 5000
    assert counters(node, "hq1") == {"ready": 0, "in_flight": 2, "dead_lettered": 0}
    acked = ok(post(node, "hq1", "ack", {"node": "w1", "seqs": [1, 7],
                                         "lease_ids": ["lease_1", ""]}))
    assert (acked["acked"], acked["acked_seqs"], acked["skipped"], acked["ready"],
            acked["in_flight"]) == (1, [1], [7], 0, 1)
    assert "server_total_ms" in acked["performance"]
    state = ok(node.http("GET", "/v0/topics/hq1?touch=false"))
    assert state["count"] == 1 and state["earliest_seq"] == 2


def test_fencing_and_redelivery_after_the_visibility_timeout(node):
    put_queue(node, "hq2")
    append(node, "hq2", {"data": 1})
    stale = ok(post(node, "hq2", "claim", {"node": "w", "lease_ms": 100}))["claimed"][0]
    wait_for(lambda: counters(node, "hq2")["ready"] == 1, 10, "the lease to expire")
    fresh = ok(post(node, "hq2", "claim", {"node": "w", "lease_ms": 60000}))["claimed"][0]
    assert fresh["deliveries"] == 2 and fresh["lease_id"] != stale["lease_id"]
    refused = ok(post(node, "hq2", "ack", {"node": "w", "seqs": [1],
                                           "lease_ids": [stale["lease_id"]]}))
    assert refused["skipped"] == [1]
    assert ok(post(node, "hq2", "ack", {"node": "w", "seqs": [1],
                                        "lease_ids": [fresh["lease_id"]]}))["acked"] == 1


def test_nack_and_extend(node):
    put_queue(node, "hq3")
    append(node, "hq3", {"data": 1}, {"data": 2})
    ok(post(node, "hq3", "claim", {"node": "w", "max": 2}))
    nacked = ok(post(node, "hq3", "nack", {"node": "w", "seqs": [1], "delay_ms": 60000}))
    assert (nacked["nacked"], nacked["nacked_seqs"], nacked["ready"], nacked["in_flight"]) \
        == (1, [1], 0, 1)
    assert ok(post(node, "hq3", "claim", {"node": "w"}))["count"] == 0   # delayed
    extended = ok(post(node, "hq3", "extend", {"node": "w", "seqs": [2, 1],
                                               "lease_ms": 5000}))
    assert (extended["extended"], extended["extended_seqs"], extended["skipped"]) == \
        (1, [2], [1])
    assert set(extended["deadlines"]) == {"2"}
    assert ok(post(node, "hq3", "nack", {"node": "w", "seqs": [2]}))["nacked_seqs"] == [2]
    assert [j["$seq"] for j in ok(post(node, "hq3", "claim", {"node": "x"}))["claimed"]] \
        == [2]


def test_dead_letters(node):
    queue = "hq4"
    dead = next(f"hq4-dlq{i}" for i in range(100)
                if shard_of_name(f"hq4-dlq{i}", node.shards) == shard_of_name(queue,
                                                                             node.shards))
    put_queue(node, queue, max_deliveries=1, dead_letter=dead)
    append(node, queue, {"data": {"x": 1}, "tag": "t"})
    ok(post(node, queue, "claim", {"node": "w", "lease_ms": 100}))
    wait_for(lambda: counters(node, queue)["ready"] == 1, 10, "the lease to expire")
    assert ok(post(node, queue, "claim", {"node": "w"}))["count"] == 0
    assert counters(node, queue) == {"ready": 0, "in_flight": 0, "dead_lettered": 1}
    [moved] = ok(post(node, dead, "diff", {"include_tags": True}))["records"]
    assert (moved["data"], moved["$tag"]) == ({"x": 1}, "t")
    assert moved["meta"] == {"$dead_letter_from": queue, "$dead_letter_deliveries": "1",
                             "$dead_letter_src_seq": "1"}


def test_dead_letters_in_another_shard(node):
    queue = "hq7"
    dead = next(f"hq7-dlq{i}" for i in range(100)
                if shard_of_name(f"hq7-dlq{i}", node.shards) != shard_of_name(queue,
                                                                             node.shards))
    put_queue(node, queue, max_deliveries=1, dead_letter=dead, durable=True)
    append(node, queue, {"data": {"x": 7}, "meta": {"k": "v"}})
    ok(post(node, queue, "claim", {"node": "w", "lease_ms": 100}))
    wait_for(lambda: counters(node, queue)["ready"] == 1, 10, "the lease to expire")
    assert ok(post(node, queue, "claim", {"node": "w"}))["count"] == 0
    wait_for(lambda: counters(node, queue)["dead_lettered"] == 1, 10, "the move")
    assert ok(node.http("GET", f"/v0/topics/{queue}?touch=false"))["count"] == 0
    [moved] = ok(post(node, dead, "diff", {}))["records"]
    assert moved["data"] == {"x": 7} and moved["meta"] == {
        "k": "v", "$dead_letter_from": queue, "$dead_letter_deliveries": "1",
        "$dead_letter_src_seq": "1"}


def test_diff_of_a_queue_is_side_effect_free(node):
    put_queue(node, "hq5")
    append(node, "hq5", {"data": 1})
    assert len(ok(post(node, "hq5", "diff", {}))["records"]) == 1
    assert counters(node, "hq5") == {"ready": 1, "in_flight": 0, "dead_lettered": 0}


def test_error_codes(node):
    put_queue(node, "hq6")
    append(node, "hlog", {"data": 1})
    error = error_of(post(node, "absent-q", "claim", {"node": "w"}), 404, "topic_not_found")
    assert error["detail"] == {"topic": "absent-q"}
    error_of(post(node, "hlog", "claim", {"node": "w"}), 409, "not_a_queue")
    error_of(post(node, "absent-q", "claim", {"node": ""}), 404, "topic_not_found")
    error_of(post(node, "hq6", "claim", {"node": ""}), 400, "invalid_request")
    error_of(post(node, "hq6", "claim", {"node": "n" * 129}), 400, "invalid_request")
    error_of(post(node, "hq6", "claim", {}), 400, "invalid_request")     # node required
    error_of(node.http("POST", "/v0/topics/hq6/claim"), 400, "invalid_request")
    error_of(node.http("POST", "/v0/topics/hq6/claim", b'{"node":"w"}',
                       {"Content-Type": "text/plain"}), 415, "unsupported_media_type")
    error_of(node.http("GET", "/v0/topics/hq6/claim"), 405, "method_not_allowed")
    for op in ("ack", "nack", "extend"):
        extra = {"lease_ms": 1000} if op == "extend" else {}
        error_of(post(node, "absent-q", op, {"node": "", "seqs": [], **extra}), 400,
                 "invalid_request")                               # field checks first
        error = error_of(post(node, "hq6", op, {"node": "w", "seqs": list(range(1001)),
                                                **extra}), 400, "batch_too_large")
        assert error["detail"] == {"seqs": 1001, "max": 1000}
        error_of(post(node, "hq6", op, {"node": "w", "seqs": [1, 2], "lease_ids": ["lease_1"],
                                        **extra}), 400, "invalid_request")
        error_of(post(node, "hq6", op, {"node": "w", "seqs": [1], "lease_ids": ["lease_g"],
                                        **extra}), 400, "invalid_request")
        error_of(post(node, "hq6", op, {"node": "w", "seqs": ["1"], **extra}), 400,
                 "invalid_request")
        error_of(post(node, "absent-q", op, {"node": "w", "seqs": [1], **extra}), 404,
                 "topic_not_found")
        error_of(post(node, "hlog", op, {"node": "w", "seqs": [1], **extra}), 409,
                 "not_a_queue")
        assert ok(post(node, "hq6", op, {"node": "w", "seqs": [], **extra}))["skipped"] == []
    error_of(post(node, "hq6", "extend", {"node": "w", "seqs": [1]}), 400, "invalid_request")


def test_get_of_a_log_has_no_queue_member(node):
    append(node, "hlog2", {"data": 1})
    assert "queue" not in ok(node.http("GET", "/v0/topics/hlog2"))


def test_metrics_count_queues_and_leases(node):
    put_queue(node, "hq8")
    append(node, "hq8", {"data": 1}, {"data": 2})
    ok(post(node, "hq8", "claim", {"node": "w", "lease_ms": 60000}))
    lines = node.http("GET", "/v0/metrics").body.decode().splitlines()
    assert 'topics_topic_queue_ready{topic="hq8"} 1' in lines
    assert 'topics_topic_queue_in_flight{topic="hq8"} 1' in lines
    body = node.http("GET", "/v0/metrics", headers={"Accept": "application/json"}).json()
    assert body["queue_topics"] >= 1 and body["queue_leases_in_flight"] >= 1
    listed = ok(node.http("GET", "/v0/topics?prefix=hq8"))["topics"]
    assert "queue" not in listed[0]                       # not a member of the list API


def test_claims_arriving_in_a_jitter_window_share_the_jobs(node):
    put_queue(node, "hq9", claim_jitter_ms=2000)    # both claims arrive within it
    append(node, "hq9", *[{"data": n} for n in range(4)])
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        replies = list(pool.map(
            lambda name: ok(post(node, "hq9", "claim", {"node": name, "max": 4})), "ab"))
    got = [[job["$seq"] for job in reply["claimed"]] for reply in replies]
    assert sorted(got) == [[1, 3], [2, 4]]
