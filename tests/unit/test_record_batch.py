"""Staging an append batch (record_batch.py) and the shard's trust decision for it
(request_intake.admitted).

Goal: a batch from the wire has every `data` parsed once; a VouchedRecords batch (a
`prevalidated` append off the shard's ipc socket) has none parsed, yet stages the same
records and meets every limit (sizes, tag, node, meta bytes and keys); a `prevalidated`
append from an untrusted socket is parsed as usual, so text that is not JSON is refused.

Method: orjson.loads wrapped in a counter (record_batch looks it up at call time); the
trust decision is a pure function, driven through a ShardHarness core for the end to end
refusal. No sockets.
"""

from __future__ import annotations

import orjson
import pytest

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.limits import (
    META_BYTES_MAX, META_KEYS_MAX, NODE_BYTES_MAX, RECORD_BYTES_MAX, TAG_BYTES_MAX,
)
from topics_actors.protocol.messages import Append, Diff, GetTopic
from topics_actors.record_batch import VouchedRecords, stage_batch
from topics_actors.shard.request_intake import admitted
from tools.testing.shard_harness import rec

BATCH = [[b'{"a":1}'], [b"2", None, None, None], [b'"x"', "tag", "node", b'{"k":"v"}'],
         [b"[3]", None, "n2"]]


def test_a_wire_batch_parses_every_data(loads_calls):
    stage_batch([list(r) for r in BATCH], "batch-node")
    assert loads_calls == [b'{"a":1}', b"2", b'"x"', b'{"k":"v"}', b"[3]"]


def test_a_vouched_batch_parses_no_data_and_stages_the_same(loads_calls):
    plain = stage_batch([list(r) for r in BATCH], "batch-node")
    loads_calls.clear()
    vouched = stage_batch(VouchedRecords(list(r) for r in BATCH), "batch-node")
    assert loads_calls == [b'{"k":"v"}']      # meta only: its key count is a shard limit
    assert vouched == plain
    assert stage_batch(VouchedRecords([[b"not json"]]), None)[0][0] == b'{"d":not json}'


def _text(size: int) -> bytes:
    """A JSON string of `size` bytes."""
    return b'"' + b"x" * (size - 2) + b'"'


def _too_many_keys() -> bytes:
    return orjson.dumps({f"k{i}": i for i in range(META_KEYS_MAX + 1)})


@pytest.mark.parametrize("record,code", [
    ([_text(RECORD_BYTES_MAX + 1)], ErrorCode.RECORD_TOO_LARGE),
    ([_text(RECORD_BYTES_MAX - 2), None, None, b"[1]"], ErrorCode.RECORD_TOO_LARGE),
    ([b"1", "t" * (TAG_BYTES_MAX + 1)], ErrorCode.INVALID_REQUEST),
    ([b"1", None, "n" * (NODE_BYTES_MAX + 1)], ErrorCode.INVALID_REQUEST),
    ([b"1", None, None, _text(META_BYTES_MAX + 1)], ErrorCode.INVALID_REQUEST),
    ([b"1", None, None, _too_many_keys()], ErrorCode.INVALID_REQUEST),
    ([b"1", None, None, b"{nope"], ErrorCode.INVALID_REQUEST),
    ([b""], ErrorCode.INVALID_REQUEST), (["1"], ErrorCode.INVALID_REQUEST),
    ([b"", None, None, b"1"], ErrorCode.INVALID_REQUEST),
])
def test_a_vouched_batch_still_meets_every_limit(record, code):
    for records in ([record], VouchedRecords([record])):
        with pytest.raises(TopicsError) as caught:
            stage_batch(records, None)
        assert caught.value.code == code


def test_the_trust_decision():
    batch = [[b"1"]]
    trusted = admitted(Append("t", batch, prevalidated=True), trusted=True)
    assert type(trusted.records) is VouchedRecords and trusted.records == batch
    for msg, on_ipc in ((Append("t", batch, prevalidated=True), False),
                        (Append("t", batch), True), (Append("t", batch), False),
                        (Diff("t"), True), (GetTopic("t"), True)):
        assert admitted(msg, on_ipc) is msg
        assert type(getattr(msg, "records", [])) is list


def test_an_untrusted_prevalidated_append_is_validated_anyway(shard):
    bad = Append("t", [rec(b"{not json")], prevalidated=True)
    with pytest.raises(TopicsError) as caught:
        shard.call(admitted(bad, trusted=False))
    assert caught.value.code == ErrorCode.INVALID_REQUEST and not shard.exists("t")
    ok = shard.call(admitted(Append("t", [rec(b'{"a":1}')], prevalidated=True), True))
    assert ok["seqs"] == [1]
    assert shard.records("t")[0][2] == b'{"d":{"a":1}}'
