"""Black-box tests of append, diff and record deletes (spec/api.md 5.5-5.7, 9) through a
real node's HTTP port: every option, limit and error code."""

import threading
import time

import pytest

from tests.http.test_http_topics import append, error_of


def diff(target, topic, **body):
    reply = target.http("POST", f"/v0/topics/{topic}/diff", body if body else None,
                      timeout_s=40)
    assert reply.status == 200, reply.body
    return reply.json()


# --- 5.5 append -----------------------------------------------------------------------------

def test_append_assigns_contiguous_seqs_and_reports_the_write(node):
    first = append(node, "ap1", {"data": 1}, {"data": {"b": [1, 2]}})
    assert first.status == 201                        # auto-created
    body = first.json()
    assert {k: body[k] for k in ("topic", "first_seq", "last_seq", "seqs", "head_seq",
                                 "count", "created", "deduped")} == {
        "topic": "ap1", "first_seq": 1, "last_seq": 2, "seqs": [1, 2], "head_seq": 2,
        "count": 2, "created": True, "deduped": False}
    performance = body["performance"]
    assert {"server_total_ms", "wal_append_ms", "fsync_ms"} <= set(performance)
    second = node.http("POST", "/v0/topics/ap1?return_seqs=false", {"records": [{"data": 3}]})
    assert second.status == 200 and "seqs" not in second.json()
    assert second.json()["first_seq"] == 3 and second.json()["count"] == 1


def test_append_create_false_and_auto_create_false_create_nothing(node):
    error_of(append(node, "ap2", {"data": 1}, create=False), 404, "topic_not_found")
    error_of(append(node, "ap2", {"data": 1}, config={"auto_create": False}), 404,
             "topic_not_found")
    error_of(node.http("GET", "/v0/topics/ap2"), 404, "topic_not_found")
    created = append(node, "ap2", {"data": 1}, config={"durability": "fsync"})
    assert created.status == 201 and created.json()["performance"]["fsync_ms"] >= 0
    assert node.http("GET", "/v0/topics/ap2").json()["config"]["durability"] == "fsync"
    ignored = append(node, "ap2", {"data": 2}, config={"durability": "memory"})
    assert ignored.status == 200
    assert node.http("GET", "/v0/topics/ap2").json()["config"]["durability"] == "fsync"


def test_idempotency_key_in_body_or_header(node):
    first = append(node, "idem1", {"data": 1}, {"data": 2}, idempotency_key="k1")
    again = append(node, "idem1", {"data": "other"}, idempotency_key="k1")
    assert again.status == 200 and again.json()["deduped"] is True
    assert again.json()["seqs"] == first.json()["seqs"] == [1, 2]
    by_header = node.http("POST", "/v0/topics/idem1", {"records": [{"data": 3}]},
                          {"Idempotency-Key": "k2"})
    repeat = node.http("POST", "/v0/topics/idem1", {"records": [{"data": 3}]},
                       {"Idempotency-Key": "k2"})
    assert repeat.json()["deduped"] is True and repeat.json()["seqs"] == by_header.json()["seqs"]
    body_wins = node.http("POST", "/v0/topics/idem1",
                          {"records": [{"data": 4}], "idempotency_key": "k3"},
                          {"Idempotency-Key": "k2"})
    assert body_wins.json()["deduped"] is False
    error_of(append(node, "idem1", {"data": 1}, idempotency_key="k" * 257), 400,
             "invalid_request")
    assert node.http("GET", "/v0/topics/idem1").json()["head_seq"] == 4


def test_batch_and_record_limits(node):
    error_of(append(node, "lim1"), 400, "invalid_request")
    error = error_of(node.http("POST", "/v0/topics/lim1",
                               {"records": [{"data": 0}] * 10001}), 400, "batch_too_large")
    assert error["detail"]["max"] == 10000
    for record in ({"data": 1, "tag": "t" * 257}, {"data": 1, "node": "n" * 129},
                   {"data": 1, "meta": {"m": "x" * 16400}},
                   {"data": 1, "meta": {f"k{i}": i for i in range(65)}}):
        error_of(append(node, "lim1", record), 400, "invalid_request")
    error_of(append(node, "lim1", {"data": "x" * 1048577}), 400, "record_too_large")
    assert append(node, "lim1", {"data": 1, "tag": "t" * 256, "node": "n" * 128}).status == 201
    assert append(node, "lim1", *([{"data": 0}] * 10000)).json()["count"] == 10000


def test_discard_reject_answers_topic_full(node):
    node.http("PUT", "/v0/topics/full1", {"cap_records": 2, "discard": "reject"})
    assert append(node, "full1", {"data": 1}, {"data": 2}).status == 200
    error = error_of(append(node, "full1", {"data": 3}), 422, "topic_full")
    assert error["detail"]["topic"] == "full1" and error["detail"]["cap_records"] == 2
    error_of(append(node, "full1", *([{"data": 1}] * 3)), 400, "record_too_large")
    assert node.http("GET", "/v0/topics/full1").json()["head_seq"] == 2


# --- 5.6 diff -------------------------------------------------------------------------------

def test_diff_reads_records_with_cursor_and_limit(node):
    append(node, "df1", {"data": {"i": 1}}, {"data": "two", "tag": "t2", "node": "n2"},
           {"data": None, "meta": {"m": 1}}, node="batchnode")
    page = diff(node, "df1")
    assert [r["$seq"] for r in page["records"]] == [1, 2, 3]
    first, second, third = page["records"]
    assert first == {"$seq": 1, "$ts": first["$ts"], "$node": "batchnode", "data": {"i": 1}}
    assert second["$node"] == "n2" and "$tag" not in second       # tags are opt-in
    assert third["data"] is None and third["meta"] == {"m": 1}
    assert {k: page[k] for k in ("topic", "next_from_seq", "head_seq", "earliest_seq",
                                 "caught_up", "tombstone", "lag")} == {
        "topic": "df1", "next_from_seq": 3, "head_seq": 3, "earliest_seq": 1,
        "caught_up": True, "tombstone": None, "lag": 0}
    assert page["performance"]["records_scanned"] == 3
    limited = diff(node, "df1", from_seq=1, limit=1, include_tags=True, include_meta=False)
    assert [r["$seq"] for r in limited["records"]] == [2]
    assert limited["records"][0]["$tag"] == "t2" and limited["lag"] == 1
    assert "meta" not in diff(node, "df1", from_seq=2, include_meta=False)["records"][0]


def test_diff_splices_payloads_exactly(node):
    tricky = [{"data": 'a,"m":b'}, {"data": {"x": ',"m":', "y": [1.5, -2, True]}},
              {"data": "caf\u00e9 \u2603 \\\"q\"", "meta": [',"m":']}, {"data": 12345678901234}]
    append(node, "df2", *tricky)
    records = diff(node, "df2")["records"]
    assert [r["data"] for r in records] == [t["data"] for t in tricky]
    assert records[2]["meta"] == [',"m":']


def _trusted_appends(client) -> int:
    return sum(s["statistics"]["trusted_appends"] for s in client.shard_statuses())


def test_http_and_the_library_agree_and_only_the_gateway_is_trusted(node):
    """The same records appended through HTTP (gateway -> shard ipc, data parsed once, at
    the gateway) and through the library (shard TCP, parsed by the shard) read back the
    same through both; include_meta false drops meta everywhere."""
    records = [{"data": {"a": 1, "m": {"b": 2, "m": 3}}, "meta": {"x": 0, "m": [1]}},
               {"data": 'q,"m":', "meta": {"k": "v"}, "tag": "t"}, {"data": [1.5, None]},
               {"data": {"m": 1}, "meta": [',"m":']}]
    client = node.client()
    before = _trusted_appends(client)
    assert append(node, "same-http", *records).status == 201
    assert _trusted_appends(client) == before + 1
    client.append("same-lib", records)
    assert _trusted_appends(client) == before + 1
    expected = [{k: r[k] for k in ("data", "meta") if k in r} for r in records]
    without_meta = [{"data": r["data"]} for r in records]
    for topic in ("same-http", "same-lib"):
        for include_meta, want in ((True, expected), (False, without_meta)):
            pages = (diff(node, topic, include_meta=include_meta)["records"],
                     client.diff(topic, include_meta=include_meta)["records"])
            for page in pages:
                assert [{k: r[k] for k in ("data", "meta") if k in r} for r in page] == want


def test_diff_byte_budget_and_limit_zero(node):
    append(node, "df3", *[{"data": "x" * 98} for _ in range(300)])      # 100 bytes each
    assert len(diff(node, "df3")["records"]) == 256                     # limit 0 = 256
    assert len(diff(node, "df3", limit=5000)["records"]) == 300         # clamped to 1000
    budget = diff(node, "df3", max_batch_bytes=250)
    assert len(budget["records"]) == 2 and budget["next_from_seq"] == 2
    assert len(diff(node, "df3", max_batch_bytes=1)["records"]) == 1    # at least one


def test_diff_node_filters(node):
    append(node, "df4", {"data": 1, "node": "a"}, {"data": 2, "node": "b"}, {"data": 3})
    assert [r["data"] for r in diff(node, "df4", node="a")["records"]] == [2, 3]
    both = diff(node, "df4", node=["a", "b"])
    assert [r["data"] for r in both["records"]] == [3] and both["next_from_seq"] == 3
    node.http("PUT", "/v0/topics/df5", {"dedupe_node": False})
    append(node, "df5", {"data": 1, "node": "a"})
    assert len(diff(node, "df5", node="a")["records"]) == 1
    error_of(node.http("POST", "/v0/topics/df4/diff", {"node": 5}), 400, "invalid_request")


def test_diff_tombstones(node):
    node.http("PUT", "/v0/topics/df6", {"cap_records": 3})
    for i in range(5):
        append(node, "df6", {"data": i})
    page = diff(node, "df6")
    assert page["tombstone"] == {"gap_from": 1, "gap_to": 2, "reason": "cap",
                                 "missed_estimate": 2, "earliest_seq": 3, "head_seq": 5}
    assert [r["$seq"] for r in page["records"]] == [3, 4, 5]
    ahead = diff(node, "df6", from_seq=9)
    assert ahead["tombstone"]["reason"] == "recreated" and ahead["tombstone"]["gap_to"] == 5


def test_diff_errors(node):
    error_of(node.http("POST", "/v0/topics/df-none/diff"), 404, "topic_not_found")
    append(node, "df7", {"data": 1})
    for body in ({"from_seq": -1}, {"limit": 1.5}, {"include_meta": "yes"},
                 {"wait_ms": -5}, {"max_batch_bytes": [1]}):
        error_of(node.http("POST", "/v0/topics/df7/diff", body), 400, "invalid_request")


def test_long_poll_is_woken_by_an_append(node):
    append(node, "lp1", {"data": 0})
    writer = threading.Timer(0.3, lambda: append(node, "lp1", {"data": 1}))
    started = time.monotonic()
    writer.start()
    try:
        page = diff(node, "lp1", from_seq=1, wait_ms=20000)
    finally:
        writer.join()
    assert [r["data"] for r in page["records"]] == [1]
    assert time.monotonic() - started < 10


def test_long_poll_times_out_empty(node):
    append(node, "lp2", {"data": 0})
    started = time.monotonic()
    page = diff(node, "lp2", from_seq=1, wait_ms=300)
    assert page["records"] == [] and page["caught_up"] is True
    assert time.monotonic() - started >= 0.25


# --- 5.7 delete records ---------------------------------------------------------------------

def test_delete_records_by_seq_and_tag(node):
    append(node, "dr1", *[{"data": i, "tag": tag} for i, tag in
                          enumerate(["a", "b1", "b2", "c", "a"], 1)])
    by_tag = node.http("POST", "/v0/topics/dr1/delete", {"match": ["tag", "Eq", "a"]})
    assert by_tag.status == 200
    body = by_tag.json()
    assert {k: body[k] for k in ("topic", "deleted", "earliest_seq", "head_seq", "count")} == {
        "topic": "dr1", "deleted": 2, "earliest_seq": 2, "head_seq": 5, "count": 3}
    assert "bytes" in body and "server_total_ms" in body["performance"]
    glob = node.http("POST", "/v0/topics/dr1/delete", {"match": "b*"}).json()
    assert glob["deleted"] == 2
    assert node.http("POST", "/v0/topics/dr1/delete",
                     {"match": ["tag", "Glob", "c*"], "before_seq": 5}).json()["deleted"] == 1
    assert [r["data"] for r in diff(node, "dr1")["records"]] == []
    append(node, "dr2", *[{"data": i} for i in range(5)])
    cut = node.http("POST", "/v0/topics/dr2/delete", {"before_seq": 3}).json()
    assert cut["deleted"] == 2 and cut["earliest_seq"] == 3
    assert diff(node, "dr2")["tombstone"] is None


@pytest.mark.parametrize("body", [None, {}, {"match": ["tag", "Like", "a"]},
                                  {"match": ["tag", "Glob", "a"]}, {"match": 5},
                                  {"match": ["tag", "Eq"]}, {"before_seq": -1}])
def test_delete_records_rejects_bad_bodies(node, body):
    error_of(node.http("POST", "/v0/topics/dr-none/delete", body), 400, "invalid_request")


def test_delete_records_of_an_absent_topic_is_404(node):
    error_of(node.http("POST", "/v0/topics/dr-none/delete", {"before_seq": 1}), 404,
             "topic_not_found")
