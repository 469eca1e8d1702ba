"""Validating and encoding a plain append batch column by column (record_batch._stage_plain,
frame.encode_plain_appends) against the record-by-record path.

Goal: a batch of PLAIN_BATCH_MIN (vouched: PLAIN_VOUCHED_MIN) or more records that are all
[data] or all [data, None, None, None] is staged by the column path, which parses every
data once, by itself, and accepts exactly what the record-by-record path (`_stage_each`,
the code every batch went through before) accepts, with the same staged records; a bad
record in first, middle or last position rejects the whole batch with the same error as
before and stages nothing. A joined-array parse would accept `[1` and `2],3` as two
records: that case is here because the column path must not do it. The frames of a plain
batch are the bytes encode_appends writes for the same records.

Method: the record-by-record path as the reference, plus the expected error text written
out; hypothesis over batches of valid JSON texts with at most one bad record (hand-picked
tricky inputs, random bytes, non-bytes) or two neighbours that join into valid array
elements, against a per-record orjson.loads oracle; orjson.loads wrapped in a counter; a
ShardHarness core for "nothing staged" and for reading back, fsck and replay.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics_actors import fsck, json_rules
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.limits import RECORD_BYTES_MAX
from topics_actors.protocol.messages import Append
from topics_actors.record_batch import (
    PLAIN_BATCH_MIN, PLAIN_VOUCHED_MIN, PlainBatch, VouchedRecords, _stage_each, stage_batch,
    stage_record,
)
from topics_actors.storage.frame import decode_at, encode_appends, encode_plain_appends

N = max(PLAIN_BATCH_MIN, PLAIN_VOUCHED_MIN) + 4
GOOD = [b'{"sku":"A-1","qty":2}', b"1", b'"x"', b"[1,2,3]", b"null", b"true", b"-0.5e-3",
        b' {"a" : [ ] } ', b'"\\u00e9\xc3\xa9"', b"18446744073709551616", b"{}", b"1e-400", b"-0",
        b"[" * json_rules.JSON_DEPTH_MAX + b"]" * json_rules.JSON_DEPTH_MAX,
        b'"' + b"y" * 600 + b'"']
NOT_JSON = "record data is not valid JSON"
NOT_BYTES = "record data must be non-empty JSON bytes"
DEEP = b"[" * (json_rules.JSON_DEPTH_MAX + 1) + b"1" + b"]" * (json_rules.JSON_DEPTH_MAX + 1)
BAD = [  # (data, error code, message fragment)
    (b"{nope", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"1,2", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b'"a"]', ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"[1", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"[1,]", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b'{"a":1,}', ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b'"\xff"', ErrorCode.INVALID_REQUEST, NOT_JSON),            # invalid UTF-8 in a string
    (b'"a\xed\xa0\x80"', ErrorCode.INVALID_REQUEST, NOT_JSON),   # an encoded surrogate
    (b'"a\nb"', ErrorCode.INVALID_REQUEST, NOT_JSON),           # a raw control character
    (b"NaN", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"Infinity", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"1e400", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (b"[1.8e308]", ErrorCode.INVALID_REQUEST, NOT_JSON),        # infinity as a double
    (b'"\\ud800"', ErrorCode.INVALID_REQUEST, NOT_JSON),         # a lone surrogate escape
    (b"\xef\xbb\xbf1", ErrorCode.INVALID_REQUEST, NOT_JSON),      # a byte order mark
    (b"   ", ErrorCode.INVALID_REQUEST, NOT_JSON),
    (DEEP, ErrorCode.INVALID_REQUEST, "deeper than 254 levels"),
    (b"", ErrorCode.INVALID_REQUEST, NOT_BYTES),
    ("1", ErrorCode.INVALID_REQUEST, NOT_BYTES),
    (1, ErrorCode.INVALID_REQUEST, NOT_BYTES),
    (None, ErrorCode.INVALID_REQUEST, NOT_BYTES),
    (bytearray(b"1"), ErrorCode.INVALID_REQUEST, NOT_BYTES),
    (b'"' + b"z" * RECORD_BYTES_MAX + b'"', ErrorCode.RECORD_TOO_LARGE, "larger than"),
]


def _batch(datas: list, four: bool) -> list:
    return [[d, None, None, None] if four else [d] for d in datas]


def _outcome(stage, records: list, node=None):
    """What staging `records` gives: the staged tuples, or (code, message) of the error."""
    try:
        return list(stage(records, node))
    except TopicsError as error:
        return error.code, str(error)


def _reference(records: list, node=None):
    node_bytes = node.encode() if node else b""
    return _outcome(lambda r, _n: _stage_each(r, node_bytes, type(r) is VouchedRecords),
                    records, node)


@pytest.mark.parametrize("four", [False, True])
@pytest.mark.parametrize("count", [1, PLAIN_BATCH_MIN - 1, PLAIN_BATCH_MIN,
                                   PLAIN_VOUCHED_MIN - 1, PLAIN_VOUCHED_MIN, N, 1000])
def test_valid_batches_of_every_shape_stage_as_record_by_record(count, four):
    datas = [GOOD[i % len(GOOD)] for i in range(count)]
    for node, kind, least in ((None, list, PLAIN_BATCH_MIN), ("n", list, PLAIN_BATCH_MIN),
                              (None, VouchedRecords, PLAIN_VOUCHED_MIN)):
        records = kind(_batch(datas, four))
        staged = stage_batch(records, node)
        assert (type(staged) is PlainBatch) is (count >= least)
        assert list(staged) == _reference(records, node)
        if type(staged) is PlainBatch:
            assert staged.envelopes == [s[0] for s in staged]
            assert staged.node == (node or "").encode()


@pytest.mark.parametrize("records", [
    [[b"1"]] * N + [[b"2", None, None, None]],           # mixed lengths
    [[b"1", "tag"]] * N, [[b"1", None, "node"]] * N, [[b"1", None, None, b'{"k":1}']] * N,
    [[b"1", None, None]] * N, [(b"1",)] * N, [[b"1"]] * (N - 1) + [(b"1",)],
])
def test_other_shapes_take_the_record_by_record_path_and_stage_the_same(records):
    staged = stage_batch(records, None)
    assert type(staged) is list and staged == _reference(records)


@pytest.mark.parametrize("four", [False, True])
@pytest.mark.parametrize("data,code,message", BAD)
def test_a_bad_record_anywhere_rejects_the_batch_with_the_error_of_before(data, code, message,
                                                                          four):
    for at in (0, N // 2, N - 1):
        datas = [GOOD[i % len(GOOD)] for i in range(N)]
        datas[at] = data
        records = _batch(datas, four)
        got = _outcome(stage_batch, records)
        assert got == _reference(records)
        assert got[0] == code and message in got[1]


@pytest.mark.parametrize("record", [[], [b"1", None, None, None, None], {"0": b"1"}, b"1",
                                    None, [b"1", None, None, b""]])
def test_a_record_of_the_wrong_shape_is_named_as_before(record):
    for at in (0, N // 2, N - 1):
        records = [[b"1"] for _ in range(N)]
        records[at] = record
        got = _outcome(stage_batch, records)
        assert got == _reference(records) and got[0] == ErrorCode.INVALID_REQUEST


def test_records_that_join_into_a_valid_array_are_still_refused():
    # "[" + b",".join(datas) + "]" is [[1,2],3]: two elements for two records, neither JSON
    for pair in ([b"[1", b"2],3"], [b'"a', b'b",1'], [b"{", b'"k":1}'], [b"[1", b"2]"]):
        records = [[b"0"]] * (N - 2) + [[d] for d in pair]
        assert _outcome(stage_batch, records) == (ErrorCode.INVALID_REQUEST, NOT_JSON)


def test_an_earlier_error_of_another_kind_is_still_the_one_reported():
    records = [[b"1"]] * N
    records[3] = [b"", None, None, None]
    records[7] = [b"{nope"]     # mixed lengths anyway; and with one shape:
    assert _outcome(stage_batch, records)[1] == NOT_BYTES
    records = [[b"1"]] * N
    records[3], records[7] = [DEEP], [b"{nope"]
    assert "deeper than" in _outcome(stage_batch, records)[1]


def test_the_column_path_parses_every_data_once_and_a_vouched_batch_none(loads_calls):
    datas = [b'{"n":%d}' % i for i in range(N)]
    assert type(stage_batch(_batch(datas, False), None)) is PlainBatch
    assert loads_calls == datas
    loads_calls.clear()
    vouched = stage_batch(VouchedRecords(_batch(datas, True)), None)
    assert type(vouched) is PlainBatch and loads_calls == []
    assert stage_batch(VouchedRecords([[b"not json"]] * N), None)[0][0] == b'{"d":not json}'


def test_a_refused_batch_stages_nothing(shard):
    shard.append("t", [b"1"], [b"2"], [b"3"])
    for data, code, _message in BAD:
        records = [[b'{"ok":1}'] for _ in range(N)]
        records[N // 2] = [data]
        with pytest.raises(TopicsError) as caught:
            shard.call(Append("t", records))
        assert caught.value.code == code
        with pytest.raises(TopicsError):
            shard.call(Append("new", records))
        assert not shard.exists("new")
    assert shard.get("t")["head_seq"] == 3
    reply = shard.call(Append("t", [[b'{"ok":1}'] for _ in range(N)]))
    assert (reply["first_seq"], reply["last_seq"]) == (4, 3 + N)
    assert [r[2] for r in shard.records("t")][3:] == [b'{"d":{"ok":1}}'] * N


# --- property: the column path accepts exactly what a per-record parse accepts ------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8)
TEXT = JSON.map(orjson.dumps) | st.sampled_from(GOOD)
TRICKY = (st.sampled_from([d for d, _c, _m in BAD if not isinstance(d, bytes) or len(d) < 1000]
                          + [b"[1", b"2],3", b"1,", b",1", b"]", b"}", b'"', b"\\", b"1 2",
                             b"tru", b'{"a"}', b"\xef\xbb\xbf1", b"-", b"01", b"1.", b".5"])
          | st.binary(max_size=6) | st.text(max_size=3) | st.integers()).map(lambda d: [d])
# Neighbours that join into valid array elements: "[1" "2],3" -> [[1,2],3]
JOINING = st.sampled_from([[b"[1", b"2],3"], [b'"a', b'b",1'], [b"{", b'"k":1},2'],
                           [b"[[", b"]],[1"], [b"1,[", b"]"]])


def _accepted_alone(data) -> bool:
    """The record staged by itself, by the record-by-record rules (JSON by orjson, and
    the depth and size limits: BAD has a record nested deeper than 254 levels)."""
    try:
        stage_record([data], b"")
    except TopicsError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(TEXT, min_size=PLAIN_BATCH_MIN, max_size=2 * N),
       st.none() | st.tuples(st.integers(min_value=0), TRICKY | JOINING), st.booleans(),
       st.booleans())
def test_the_batch_is_accepted_exactly_when_every_record_parses_alone(datas, bad, four,
                                                                      vouched):
    if bad is not None:
        at = bad[0] % (len(datas) - 1)
        datas[at:at + len(bad[1])] = bad[1]
    records = _batch(datas, four)
    if vouched:
        records = VouchedRecords(records)
    got = _outcome(stage_batch, records)
    assert got == _reference(records)
    if not vouched:
        assert isinstance(got, list) is all(map(_accepted_alone, datas))


# --- the frames of a plain batch ----------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=30), st.sampled_from([b"", b"n", "nœud".encode()]),
       st.sampled_from([0, 4]), st.integers(1, 2**63), st.integers(0, 2**48),
       st.integers(0, 2**64 - 1), st.binary(max_size=5))
def test_plain_frames_are_the_bytes_encode_appends_writes(datas, node, flags, first, ts, tid,
                                                          before):
    staged = stage_batch(VouchedRecords(_batch(datas, False)), node.decode() or None)
    envelopes = [s[0] for s in staged]
    expected, plain = bytearray(before), bytearray(before)
    offsets = encode_appends(expected, tid, first, ts, flags, staged)
    assert encode_plain_appends(plain, tid, first, ts, flags, envelopes, node) == offsets
    assert plain == expected
    frames = [decode_at(plain, at, len(plain)) for at in offsets]
    assert [(f.seq, f.data, f.node) for f in frames] == [
        (first + i, e, node.decode() or None) for i, e in enumerate(envelopes)]


@pytest.mark.parametrize("durability", ["ephemeral", "memory", "disk", "fsync"])
def test_plain_batches_read_back_pass_fsck_and_replay_in_every_class(shard, durability):
    shard.put("t", durability=durability)
    plain = [[b'{"i":%d}' % i] for i in range(N)]
    shard.call(Append("t", plain))
    shard.call(Append("t", [r + [None, None, None] for r in plain], node="n1"))
    shard.call(Append("t", plain[:3]))          # record by record, in the same log
    expected = ([[b'{"d":{"i":%d}}' % i, None, None] for i in range(N)]
                + [[b'{"d":{"i":%d}}' % i, None, "n1"] for i in range(N)]
                + [[b'{"d":{"i":%d}}' % i, None, None] for i in range(3)])
    got = [[r[2], r[3], r[4]] for r in shard.records("t")]
    assert got == expected and [r[0] for r in shard.records("t")] == list(range(1, 2 * N + 4))
    shard.close()
    report = fsck.check(shard.data_dir)
    assert report.problems == []
    assert report.frames_by_type.get("APPEND", 0) == (0 if durability == "ephemeral"
                                                      else 2 * N + 3)
    shard.start()
    after = [[r[2], r[3], r[4]] for r in shard.records("t")]
    assert after == ([] if durability == "ephemeral" else expected)
