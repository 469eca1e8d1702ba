"""The linger rules without a node (client/linger_batcher.py): which appends may share a
request, the bounds of a batch, the batch's request, each caller's cut of its reply, which
refusals send a batch again one caller at a time, and when an adaptive batch may go."""

from __future__ import annotations

import pytest

from topics_actors.client.linger_batcher import (
    AUTO_LINGER_MS, IN_FLIGHT_LIMIT, IN_FLIGHT_MAX_DEFAULT, RECORD_OVERHEAD_BYTES, Batch,
    LingerBatcher, LingerOptions, batch_key, pending_of,
)
from topics_actors.client.request_shapes import wire_record
from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.limits import BATCH_RECORDS_MAX

pytestmark = pytest.mark.timeout(20)

LIMITS = LingerOptions(2, batch_records_max=4, batch_bytes_max=1_000)


def session_key() -> str:
    return "~s:1"


def pending(records: list, options: dict, key: tuple | None = (None,)):
    return pending_of("t", records, options, key, LIMITS, session_key)


def batch_of(*pendings) -> Batch:
    batcher = LingerBatcher(LIMITS)
    lane = batcher.lane("t", "t", None)
    for one in pendings:
        batcher.add(lane, one)
    return batcher.take(lane)


def test_options_are_checked_against_the_server_limits():
    assert LingerOptions.of(0, 1, 1, 1) is None
    for bad in ({"linger_ms": -1}, {"linger_ms": 5_000},
                {"linger_ms": 1, "batch_records_max": BATCH_RECORDS_MAX + 1},
                {"linger_ms": 1, "batch_bytes_max": 0}, {"linger_ms": 1, "waiting_max": 0}):
        with pytest.raises(TopicsError):
            LingerOptions(**bad)


def test_auto_is_the_adaptive_linger_bounded_by_auto_linger_ms():
    options = LingerOptions.of("auto", 10, 1_000, 5)
    assert (options.adaptive, options.linger_ms, options.in_flight_max) == \
        (True, AUTO_LINGER_MS, IN_FLIGHT_MAX_DEFAULT)
    assert LingerOptions.of("auto", 10, 1_000, 5, in_flight_max=2).in_flight_max == 2
    assert LingerOptions.of(1.5, 10, 1_000, 5).adaptive is False
    for bad in ("fast", "AUTO", True, [1]):
        with pytest.raises(TopicsError):
            LingerOptions.of(bad, 10, 1_000, 5)
    for in_flight in (0, IN_FLIGHT_LIMIT + 1):
        with pytest.raises(TopicsError):
            LingerOptions.of("auto", 10, 1_000, 5, in_flight_max=in_flight)


def test_an_adaptive_batch_goes_at_once_only_while_there_is_room_in_flight():
    two = LingerOptions(5, adaptive=True, in_flight_max=2)
    assert [two.goes_at_once(n) for n in range(4)] == [True, True, False, False]
    assert not LingerOptions(5).goes_at_once(0)       # fixed: always waits linger_ms


def test_only_plain_appends_share_a_batch():
    assert batch_key({}) == batch_key({"node": "n", "return_seqs": False}) == (None,)
    assert batch_key({"create": False}) == (False,)
    assert batch_key({"idempotency_key": "k"}) is None
    assert batch_key({"config": {}}) is None
    assert batch_key({"something": 1}) is None


def test_a_record_of_data_alone_goes_in_the_short_form():
    assert wire_record({"data": {"a": 1}}) == [b'{"a":1}']
    assert wire_record({"data": 1, "tag": "t"}) == [b"1", "t", None, None]
    assert wire_record({"data": 1, "meta": {"m": 2}}) == [b"1", None, None, b'{"m":2}']
    made = pending([{"data": 1}, {"data": 2, "node": "own"}], {"node": "n"})
    assert made.records == [[b"1", None, "n", None], [b"2", None, "own", None]]
    assert pending([{"data": 1}], {}).records == [[b"1"]]


def test_a_pending_append_is_checked_and_sized_like_a_lone_one():
    with pytest.raises(TopicsError):
        pending([{"nodata": 1}], {})
    made = pending([{"data": 1, "tag": "ab"}, {"data": 2, "node": "own"}], {"node": "n"})
    assert [r[2] for r in made.records] == ["n", "own"]      # the option fills the gaps
    assert made.bytes == 1 + 2 + 1 + 1 + 3 + 2 * RECORD_OVERHEAD_BYTES
    assert made.message is None and made.count == 2          # it may join a batch
    assert pending([{"data": 1}] * 5, {}).message is not None            # > records max
    assert pending([{"data": "x" * 2_000}], {}).message is not None      # > bytes max
    assert pending([{"data": 1}], {"idempotency_key": "k"}, None).message is not None


def test_a_batch_is_bounded_and_its_request_holds_every_record():
    batcher = LingerBatcher(LIMITS)
    lane = batcher.lane("t", "t", None)
    one = pending([{"data": 1}], {})
    three = pending([{"data": 2}, {"data": 3}, {"data": 4}], {})
    batcher.add(lane, one)
    assert not batcher.full(lane)
    batcher.add(lane, three)
    assert batcher.full(lane)
    batcher.add(lane, pending([{"data": 5}], {}))       # does not fit: the next batch's
    batch = batcher.take(lane)
    assert batch.pendings == [one, three] and lane.out == 1 and not batcher.full(lane)
    msg = batch.message(session_key)
    assert [r[0] for r in msg.records] == [b"1", b"2", b"3", b"4"]
    assert (msg.idempotency_key, msg.return_seqs, msg.config) == ("~s:1", False, None)
    assert [p.records for p in batcher.take(lane).pendings] == [[[b"5"]]]
    assert batcher.statistics().linger_requests == 2


def test_a_lone_append_keeps_its_own_request():
    alone = pending([{"data": 1}], {"idempotency_key": "k", "config": {"a": 1}}, None)
    msg = batch_of(alone).message(session_key)
    assert (msg.idempotency_key, msg.config, msg.return_seqs) == ("k", {"a": 1}, True)


def test_each_caller_gets_its_cut_of_the_reply():
    sizes = (1, 2, 1)
    batch = batch_of(*(pending([{"data": i}] * size, {"return_seqs": i != 2})
                       for i, size in enumerate(sizes)))
    reply = {"topic": "t", "first_seq": 10, "last_seq": 13, "head_seq": 13, "count": 4,
             "created": True, "deduped": False, "performance": {"fsync_ms": 0.1}}
    cut = batch.replies(reply)
    assert [(r["first_seq"], r["last_seq"], r["count"]) for r in cut] == \
        [(10, 10, 1), (11, 12, 2), (13, 13, 1)]
    assert [r.get("seqs") for r in cut] == [[10], [11, 12], None]
    assert [r["created"] for r in cut] == [True, False, False]
    assert all(r["head_seq"] == 13 and r["performance"] == {"fsync_ms": 0.1} for r in cut)


def test_only_content_refusals_split_a_batch():
    batch = batch_of(*(pending([{"data": i}], {}) for i in range(2)))
    assert batch.splits_on(invalid("bad tag"))
    assert batch.splits_on(TopicsError("full", ErrorCode.TOPIC_FULL))
    assert batch.splits_on(TopicsError("quota", ErrorCode.THROTTLED, {"limit": "bytes"}))
    assert not batch.splits_on(TopicsError("gone", ErrorCode.TOPIC_NOT_FOUND))
    assert not batch.splits_on(TopicsError("down", ErrorCode.NOT_READY))
    alone = batch_of(pending([{"data": 1}], {}))
    assert not alone.splits_on(invalid("bad tag"))
