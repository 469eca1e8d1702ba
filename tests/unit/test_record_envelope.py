"""The stored record envelope (topics_actors/record_envelope.py) and the readers built on it.

Goal: build and split are inverses for every pair of JSON texts, the split is a slice
(no parse) whenever the envelope holds `,"m":` once, an envelope holding it several times
still yields the same JSON values, byte accounting agrees with the texts, and the library's
api_record turns a diff wire record into the same data/meta as before (include_meta false
drops meta).

Method: hypothesis over JSON values written by orjson (what the gateway and the library
store) and hand-written texts with whitespace and nested "m" members (what a third-party
ZeroMQ client may store); orjson.loads replaced by a failing stub where no parse may happen.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors import record_envelope as env
from topics_actors.client.request_shapes import api_record
from topics_actors.storage.frame_types import FLAG_META, FLAG_NODE, FLAG_TAG

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["m", "d", "a", ',"m":', "\u00e9"]) | st.text(), inner,
                      max_size=4),
    max_leaves=12)


def _no_parse(monkeypatch) -> None:
    def refuse(_raw):
        raise AssertionError("the envelope was parsed")
    monkeypatch.setattr(env.orjson, "loads", refuse)


@settings(max_examples=300, deadline=None)
@given(JSON, st.none() | JSON)
def test_split_inverts_build_for_compact_json(data, meta):
    data_text = orjson.dumps(data)
    meta_text = None if meta is None else orjson.dumps(meta)
    envelope = env.build(data_text, meta_text)
    flags = env.meta_flag(meta_text) | FLAG_TAG | FLAG_NODE
    assert env.has_meta(flags) is (meta is not None)
    assert env.split(envelope, env.has_meta(flags)) == (data_text, meta_text)
    assert env.data(envelope, env.has_meta(flags)) == data_text
    assert env.payload_bytes(len(envelope), flags) == len(data_text) + len(meta_text or b"")
    assert orjson.loads(envelope) == ({"d": data} if meta is None else {"d": data, "m": meta})


@pytest.mark.parametrize("data,meta", [
    (b'{"a":1,"m":2}', None),                       # no meta: never searched, never parsed
    (b'"a,\\"m\\":b"', b'[",\\"m\\":"]'),           # the mark escaped inside strings
    (b'{"m":{"m":1}}', b'{"m":2}'),                 # "m" members that come first
    (b' [1, {"x": 2, "m": 3}] ', b' {"k" : "v"} '),   # whitespace: a third-party writer
])
def test_a_single_mark_is_the_split_point_without_a_parse(monkeypatch, data, meta):
    envelope = env.build(data, meta)
    _no_parse(monkeypatch)
    assert env.split(envelope, meta is not None) == (data, meta)
    assert bytes(env.data(memoryview(envelope), meta is not None)) == data


@pytest.mark.parametrize("data,meta", [
    (b'{"a":1,"m":2}', b'{"k":1}'), (b'[1]', b'{"a":[],"m":{"b":0,"m":1}}'),
    (b' {"a": 1,"m":2} ', b'{"x":{"y":1,"m":"z"}}'),
])
def test_several_marks_fall_back_to_a_parse_with_the_same_values(data, meta):
    got_data, got_meta = env.split(env.build(data, meta), True)
    assert orjson.loads(got_data) == orjson.loads(data)
    assert orjson.loads(got_meta) == orjson.loads(meta)


def test_data_of_a_buffer_without_meta_is_a_view_not_a_copy():
    view = memoryview(env.build(b'{"x":[1,2]}', None))
    cut = env.data(view, False)
    assert isinstance(cut, memoryview) and bytes(cut) == b'{"x":[1,2]}'
    assert env.split(view, False) == (b'{"x":[1,2]}', None)
    assert env.data(memoryview(env.build(b"1", b"2")), True) == b"1"


def test_layout_constants_match_the_stored_form():
    assert env.build(b"7", None) == b'{"d":7}'
    assert env.build(b"7", b"{}") == b'{"d":7,"m":{}}'
    assert env.meta_flag(None) == 0 and env.meta_flag(b"{}") == FLAG_META
    assert (env.PLAIN_OVERHEAD, env.META_OVERHEAD) == (6, 11)
    assert env.build(b"[1]", None)[env.PLAIN_DATA] == b"[1]"


@pytest.mark.parametrize("data,meta", [
    ({"a": 1}, None), ("x", {"k": "v"}), ({"a": 1, "m": 2}, {"b": 1, "m": 3}),
    ('a,"m":b', [',"m":']), (12345678901234, None),
])
def test_api_record_gives_the_values_as_before(data, meta):
    meta_text = None if meta is None else orjson.dumps(meta)
    wire = [4, 1000, env.build(orjson.dumps(data), meta_text), "t", None, meta is not None]
    full = api_record(wire, include_meta=True)
    expected = {"$seq": 4, "$ts": 1000, "$tag": "t", "data": data}
    assert full == (expected if meta is None else {**expected, "meta": meta})
    assert api_record(wire, include_meta=False) == expected
