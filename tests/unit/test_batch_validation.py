"""Validating and encoding a plain append batch in one step (record_batch.PlainBatch, one
AppendBatch frame) against the record-by-record path.

Goal: a batch of PLAIN_BATCH_MIN (vouched: PLAIN_VOUCHED_MIN) or more records that are all
[data] or all [data, None, None, None], or any batch in the array form (one JSON text of
the datas), is staged as one PlainBatch, checked in one msgspec call plus a look at the
whole text for what msgspec does not check (UTF-8, numbers a double cannot hold), and
accepts exactly what the record-by-record path (`_stage_each`, the code every batch went
through before) accepts, with the same staged records; a bad record in first, middle or
last position rejects the whole batch with the same error as before and stages nothing. A
joined-array parse would accept `[1` and `2],3` as two records: that case is here because
the column path must not do it. An AppendBatch frame reads back as the Append frames
encode_appends writes for the same records. Without msgspec (the fallback), the same rules
hold: every data is parsed by orjson.

Method: the record-by-record path as the reference, plus the expected error text written
out; hypothesis over batches of valid JSON texts with at most one bad record (hand-picked
tricky inputs, random bytes, non-bytes) or two neighbours that join into valid array
elements, against a per-record orjson.loads oracle; the array form against orjson.loads of
the whole text; orjson.loads wrapped in a counter; a ShardHarness core for "nothing
staged" and for reading back, fsck and replay.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from itertools import accumulate

from topics_actors import fsck, json_rules, record_batch
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.limits import RECORD_BYTES_MAX
from topics_actors.protocol.messages import Append
from topics_actors.record_batch import (
    PLAIN_BATCH_MIN, PLAIN_VOUCHED_MIN, PlainBatch, VouchedRecords, VouchedText, _stage_each,
    stage_batch, stage_record,
)
from topics_actors.shard.batch_stager import encode_staged
from topics_actors.storage.file_table import FileTable, make_loc
from topics_actors.storage.frame import decode_at, encode_appends
from topics_actors.storage.fs import RealFs

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


@pytest.fixture(params=["msgspec", "fallback"])
def checker(request, monkeypatch) -> str:
    """Every test that takes it runs twice: with msgspec's one-call check, and without
    (the pure-Python fallback: each data parsed by orjson)."""
    if request.param == "fallback":
        monkeypatch.setattr(record_batch, "_RAW_ARRAY", None)
    return request.param


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
def test_valid_batches_of_every_shape_stage_as_record_by_record(count, four, checker):
    datas = [GOOD[i % len(GOOD)] for i in range(count)]
    for node, kind, least in ((None, list, PLAIN_BATCH_MIN), ("n", list, PLAIN_BATCH_MIN),
                              (None, VouchedRecords, PLAIN_VOUCHED_MIN)):
        records = kind(_batch(datas, four))
        staged = stage_batch(records, node)
        assert (type(staged) is PlainBatch) is (count >= least)
        assert list(staged) == _reference(records, node)
        if type(staged) is PlainBatch:
            assert staged.texts == b"".join(datas)
            assert list(staged.ends) == list(accumulate(map(len, datas)))
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
                                                                          four, checker):
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


def test_records_that_join_into_a_valid_array_are_still_refused(checker):
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


def test_the_column_path_checks_a_batch_in_one_call_and_a_vouched_batch_not_at_all(
        loads_calls):
    datas = [b'{"n":%d}' % i for i in range(N)]
    assert type(stage_batch(_batch(datas, False), None)) is PlainBatch
    assert loads_calls == []                     # msgspec's one call, no parse per record
    in_doubt = datas[:-1] + ['{"é":1}'.encode()]  # not ASCII: UTF-8 is checked, then fine
    assert type(stage_batch(_batch(in_doubt, False), None)) is PlainBatch
    assert loads_calls == []
    big = [b'{"n":12345678901234567890}']     # no doubt: a double holds it
    assert type(stage_batch(_batch(datas[:-1] + big, False), None)) is PlainBatch
    assert loads_calls == []
    for doubt in (b"1e300", b"9" * 300, b'"550e8400"', b'"\\u00e9"' + b" " * 600):
        loads_calls.clear()        # a number, a digit before an e (a UUID here: a false
                                   # alarm) or a length: orjson decides
        assert type(stage_batch(_batch(datas[:-1] + [doubt], False), None)) is PlainBatch
        assert loads_calls == datas[:-1] + [doubt]
    loads_calls.clear()
    vouched = stage_batch(VouchedRecords(_batch(datas, True)), None)
    assert type(vouched) is PlainBatch and loads_calls == []
    assert stage_batch(VouchedRecords([[b"not json"]] * N), None)[0][0] == b'{"d":not json}'


def test_without_msgspec_every_data_is_parsed_once(loads_calls, monkeypatch):
    monkeypatch.setattr(record_batch, "_RAW_ARRAY", None)
    datas = [b'{"n":%d}' % i for i in range(N)]
    assert type(stage_batch(_batch(datas, False), None)) is PlainBatch
    assert loads_calls == datas


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


# --- the array form ------------------------------------------------------------------------

def _array_outcome(text: bytes, vouched: bool = False):
    """The datas and nodes staged from an array-form batch, or (code, message)."""
    try:
        staged = stage_batch(VouchedText(text) if vouched else text, None)
    except TopicsError as error:
        return error.code, str(error)
    return [(s[0][5:-1], s[2]) for s in staged]


def _array_oracle(text: bytes):
    """What the array form must take: the elements of orjson's parse of the whole text,
    each within the record limits (as a record by itself)."""
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if type(values) is not list or not values:
        return None
    return values


def _element_fits(value) -> bool:
    """An element of an array is a record's data: orjson writes it (not too deep) and it
    is within the limits of a record by itself."""
    try:
        return _accepted_alone(orjson.dumps(value))
    except TypeError:
        return False


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(TEXT, min_size=1, max_size=2 * N),
       st.none() | st.tuples(st.integers(min_value=0), TRICKY | JOINING))
def test_the_array_form_takes_exactly_the_arrays_orjson_reads(checker, datas, bad):
    datas = [d for d in datas if isinstance(d, bytes)]
    if bad is not None:
        at = bad[0] % len(datas) if datas else 0
        datas[at:at + len(bad[1])] = [d for d in bad[1] if isinstance(d, bytes)]
    text = b"[" + b",".join(datas) + b"]"
    got, values = _array_outcome(text), _array_oracle(text)
    fits = values is not None and all(map(_element_fits, values))
    assert isinstance(got, list) is fits, (text, got)
    if fits:
        assert [orjson.loads(data) for data, _node in got] == values
        canonical = list(map(orjson.dumps, values))
        if checker == "msgspec" and text == b"[" + b",".join(canonical) + b"]":
            assert [d for d, _ in got] == canonical        # each data's bytes, as sent


@pytest.mark.parametrize("text,message", [
    (b"[1,2", "not valid JSON"), (b'{"a":1}', "must be a JSON array"),
    (b"1", "must be a JSON array"), (b"[]", "must not be empty"),
    (b'["\xff"]', "not valid JSON"),
    (b"[1e999]", "not valid JSON"), (b"[" + DEEP + b"]", "deeper than 254 levels"),
    (b'["' + b"z" * RECORD_BYTES_MAX + b'"]', "larger than"),
])
def test_a_bad_array_is_refused_with_a_clear_error(checker, text, message):
    got = _array_outcome(text)
    assert got[0] in (ErrorCode.INVALID_REQUEST, ErrorCode.RECORD_TOO_LARGE), got
    assert message in got[1]


def test_an_array_keeps_each_datas_bytes_or_writes_them_again_when_not_compact(checker):
    compact = b'[{"a":1.50},"\\u00e9",[ 1 ]]'
    assert _array_outcome(compact) == ([(b'{"a":1.50}', b""), (b'"\\u00e9"', b""),
                                        (b"[ 1 ]", b"")] if checker == "msgspec" else
                                       [(b'{"a":1.5}', b""), ('"é"'.encode(), b""),
                                        (b"[1]", b"")])
    spaced = b'[ {"a":1}, 2 ]'
    assert _array_outcome(spaced) == [(b'{"a":1}', b""), (b"2", b"")]
    assert _array_outcome(b"[1,2]", vouched=True) == [(b"1", b""), (b"2", b"")]


# --- the frames of a plain batch ----------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=30), st.sampled_from([b"", b"n", "nœud".encode()]),
       st.sampled_from([0, 4]), st.integers(1, 2**63), st.integers(0, 2**48),
       st.integers(0, 2**64 - 1), st.binary(max_size=5))
def test_a_batch_frame_reads_back_as_the_append_frames_encode_appends_writes(
        datas, node, flags, first, ts, tid, before):
    staged = stage_batch(VouchedRecords(_batch(datas, False) * PLAIN_VOUCHED_MIN),
                         node.decode() or None)
    assert type(staged) is PlainBatch
    expected, batch = bytearray(before), bytearray(before)
    offsets = encode_appends(expected, tid, first, ts, flags, list(staged))
    at = encode_staged(batch, tid, first, ts, flags, staged)
    assert at == len(before)
    frame = decode_at(batch, at, len(batch))
    assert (frame.type, frame.seq, frame.ts, frame.topic_id, frame.size) == (
        20, first, ts, tid, len(batch) - at)
    files = FileTable(RealFs())
    number = files.add_buffer(batch)
    got = [files.read(make_loc(number, at), first + i) for i in range(len(staged))]
    frames = [decode_at(expected, offset, len(expected)) for offset in offsets]
    assert [(r.seq, r.ts, r.envelope, r.tag, r.node, r.flags) for r in got] == [
        (f.seq, f.ts, f.data, f.tag, f.node, f.flags) for f in frames]


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
    logged = durability != "ephemeral"
    assert report.frames_by_type.get("APPEND", 0) == (3 if logged else 0)
    assert report.frames_by_type.get("APPEND_BATCH", 0) == (2 if logged else 0)
    shard.start()
    after = [[r[2], r[3], r[4]] for r in shard.records("t")]
    assert after == ([] if durability == "ephemeral" else expected)
