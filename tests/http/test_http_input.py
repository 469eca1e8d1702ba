"""Input that cannot round-trip exactly is refused with 400 invalid_request and changes
nothing, over HTTP and through the ZeroMQ client alike (issue: JSON nested deeper than 254
levels answered 500; an integer beyond 64 bits was stored as a float; the client raised a
bare TypeError)."""

from __future__ import annotations

import pytest

from tests.http.test_http_topics import append, error_of
from topics_actors.client import TopicsError
from topics_actors.json_rules import JSON_DEPTH_MAX


def nested(levels: int):
    value = "x"
    for _ in range(levels):
        value = {"k": value}
    return value


def nested_text(levels: int) -> bytes:
    return b'{"k":' * levels + b'"x"' + b"}" * levels


def head_and_count(node, topic: str) -> tuple[int, int]:
    state = node.http("GET", f"/v0/topics/{topic}").json()
    return state["head_seq"], state["count"]


@pytest.mark.parametrize("levels", [JSON_DEPTH_MAX + 1, 600, 1000])
def test_too_deep_data_or_meta_is_refused_and_changes_nothing(node, levels):
    assert append(node, "deep", {"data": 1}).status in (200, 201)
    before = head_and_count(node, "deep")
    for record in (b'{"data": ' + nested_text(levels) + b"}",
                   b'{"data": 1, "meta": ' + nested_text(levels) + b"}"):
        reply = node.http("POST", "/v0/topics/deep", b'{"records": [{"data": 2}, ' + record
                          + b"]}", {"Content-Type": "application/json"})
        error = error_of(reply, 400, "invalid_request")
        assert f"deeper than {JSON_DEPTH_MAX} levels" in error["message"]
    assert head_and_count(node, "deep") == before


def test_the_deepest_record_allowed_round_trips(node):
    value = nested(JSON_DEPTH_MAX - 1)          # the data object adds the last level
    reply = append(node, "deepest", {"data": value, "meta": value})
    assert reply.status == 201, reply.body
    got = node.http("POST", "/v0/topics/deepest/diff", {}).json()["records"][0]
    assert got["data"] == value and got["meta"] == value


@pytest.mark.parametrize("literal", [b"18446744073709551616", b"-9223372036854775809"])
def test_an_integer_beyond_64_bits_is_refused_not_stored_as_a_float(node, literal):
    assert append(node, "ints", {"data": 1}).status in (200, 201)
    before = head_and_count(node, "ints")
    body = b'{"records": [{"data": {"n": ' + literal + b"}}]}"
    reply = node.http("POST", "/v0/topics/ints", body,
                      {"Content-Type": "application/json"})
    assert "64-bit range" in error_of(reply, 400, "invalid_request")["message"]
    assert head_and_count(node, "ints") == before


def test_the_largest_integers_round_trip_exactly(node):
    body = b'{"records": [{"data": [18446744073709551615, -9223372036854775808]}]}'
    reply = node.http("POST", "/v0/topics/edges", body, {"Content-Type": "application/json"})
    assert reply.status == 201, reply.body
    got = node.http("POST", "/v0/topics/edges/diff", {})
    assert b'"data":[18446744073709551615,-9223372036854775808]' in got.body


def test_the_zeromq_client_refuses_the_same_input_with_a_topics_error(node):
    client = node.client()
    for record, words in (({"data": nested(JSON_DEPTH_MAX + 1)}, "deeper than"),
                          ({"data": 1, "meta": {"n": 2**64}}, "64-bit range")):
        with pytest.raises(TopicsError, match=words) as excinfo:
            client.append("zmq-input", [record])
        assert excinfo.value.code.wire == "invalid_request"
    with pytest.raises(TopicsError, match="deeper than") as excinfo:   # raw bytes too
        client.append_encoded("zmq-input", [[b"[" * 300 + b"]" * 300]],
                              idempotency_key="raw-deep")
    assert excinfo.value.status == 400
    with pytest.raises(TopicsError):
        client.get_topic("zmq-input")              # nothing was created
