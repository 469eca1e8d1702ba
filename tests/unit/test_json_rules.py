"""Record JSON that cannot round-trip exactly is refused where it comes in, with a clear
invalid_request, on every surface: too deep for orjson to write, or an integer orjson would
read back as a float."""

from __future__ import annotations

import pytest

from topics_actors import json_rules
from topics_actors.client.request_shapes import wire_record
from topics_actors.errors import TopicsError
from topics_actors.gateway.append_body import wire_records
from topics_actors.gateway.http_message import HttpRequest
from topics_actors.gateway.request_body import json_object
from topics_actors.record_batch import stage_batch

DEEPEST = json_rules.JSON_DEPTH_MAX


def nested(levels: int):
    value = 1
    for _ in range(levels):
        value = [value]
    return value


def nested_text(levels: int) -> bytes:
    return b"[" * levels + b"1" + b"]" * levels


def posted(body: bytes) -> HttpRequest:
    return HttpRequest("POST", "/v0/topics/t", "", {"content-type": "application/json"}, body)


def code(excinfo) -> str:
    return excinfo.value.code.wire


def test_the_deepest_value_passes_everywhere_and_one_more_level_fails_everywhere():
    assert json_rules.dumps(nested(DEEPEST), "data") == nested_text(DEEPEST)
    assert wire_records([{"data": nested(DEEPEST)}])[0][0][0] == nested_text(DEEPEST)
    assert stage_batch([[nested_text(DEEPEST)]], None)
    for refuse in (lambda: json_rules.dumps(nested(DEEPEST + 1), "record data"),
                   lambda: wire_records([{"data": 1, "meta": nested(DEEPEST + 1)}]),
                   lambda: wire_record({"data": nested(DEEPEST + 1)}),
                   lambda: stage_batch([[nested_text(DEEPEST + 1)]], None),
                   lambda: stage_batch([[b"1", "tag", None, nested_text(DEEPEST + 1)]], None)):
        with pytest.raises(TopicsError, match=f"deeper than {DEEPEST} levels") as excinfo:
            refuse()
        assert code(excinfo) == "invalid_request"


@pytest.mark.parametrize("literal", [b"18446744073709551616", b"-9223372036854775809",
                                     b"123456789012345678901234567890"])
def test_an_integer_outside_64_bits_is_refused_not_turned_into_a_float(literal):
    body = b'{"records": [{"data": {"n": ' + literal + b'}}]}'
    with pytest.raises(TopicsError, match="outside the 64-bit range") as excinfo:
        json_object(posted(body), empty_ok=False)
    assert code(excinfo) == "invalid_request"
    with pytest.raises(TopicsError, match="outside the 64-bit range"):
        wire_record({"data": int(literal)})


@pytest.mark.parametrize("literal", [b"18446744073709551615", b"-9223372036854775808",
                                     b"9223372036854775808"])
def test_integers_at_the_edges_pass_unchanged(literal):
    body = b'{"records": [{"data": ' + literal + b', "tag": "12345678901234567890123"}]}'
    parsed = json_object(posted(body), empty_ok=False)
    assert wire_records(parsed["records"])[0][0][0] == literal


def test_a_number_with_a_fraction_or_exponent_is_a_float_as_ever():
    body = b'{"records": [{"data": [1.8446744073709551616e19, 12345678901234567890.5]}]}'
    text = wire_records(json_object(posted(body), empty_ok=False)["records"])[0]
    assert text == b"[[1.8446744073709552e+19,1.2345678901234567e+19]]"   # the array form


def test_a_long_digit_run_inside_a_string_is_not_an_integer():
    json_rules.check_integers(b'{"id": "123456789012345678901234567890"}', "data")
