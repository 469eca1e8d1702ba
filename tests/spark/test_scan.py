"""The `scan` kind against a real node, no Spark: columns, ranges, gaps, raw data text.

Goal: a scan page holds exactly the records (after_seq, until_seq] in seq order with their
data JSON text as appended (also for records with meta), pages by limit and bytes, and
reports the same tombstone a diff would at a cursor below the cap floor.
"""

from __future__ import annotations

from array import array

import pytest

from topics_actors.errors import TopicsError
from topics_actors.spark.arrow_columns import batch_from_scan

pytestmark = pytest.mark.timeout(60)


def columns(reply: dict) -> tuple[list[int], list[bytes]]:
    seqs = array("q", reply["seqs"]).tolist()
    offsets = array("i", reply["offsets"]).tolist()
    data = [reply["data"][a:b] for a, b in zip(offsets, offsets[1:])]
    return seqs, data


def test_scan_returns_a_range_in_columns(node):
    c = node.client()
    c.append("scan-a", [{"data": {"i": i, "s": "é"}, "tag": f"t{i}"} for i in range(1, 21)])
    c.append("scan-a", [{"data": [1, {"x": None}], "meta": {"k": "v"}, "node": "n1"}])
    reply = c.scan("scan-a", 4, 21, 100)
    seqs, data = columns(reply)
    assert seqs == list(range(5, 22)) and reply["count"] == 17
    assert data[0] == '{"i":5,"s":"é"}'.encode() and data[-1] == b'[1,{"x":null}]'
    assert reply["tags"][0] == "t5" and reply["nodes"][-1] == "n1"
    assert (reply["next_from_seq"], reply["caught_up"], reply["tombstone"]) == (21, True, None)
    assert len(array("q", reply["ts"])) == 17
    batch = batch_from_scan(reply)
    assert batch.num_rows == 17 and batch.column("data")[0].as_py() == '{"i":5,"s":"é"}'


def test_scan_pages_by_limit_and_stops_at_until(node):
    c = node.client()
    c.append("scan-b", [{"data": i} for i in range(1, 101)])
    got, cursor = [], 10
    while cursor < 60:
        reply = c.scan("scan-b", cursor, 60, 7)
        assert reply["count"] <= 7
        got += columns(reply)[0]
        cursor = reply["next_from_seq"]
    assert got == list(range(11, 61))
    small = c.scan("scan-b", 0, 0, 0, max_batch_bytes=5)
    assert columns(small)[1] == [b"1", b"2", b"3", b"4", b"5"]


def test_scan_reports_eviction_and_unknown_topics(node):
    c = node.client()
    c.put_topic("scan-cap", cap_records=10)
    for i in range(1, 41):
        c.append("scan-cap", [{"data": i}])
    reply = c.scan("scan-cap", 0, 0, 100)
    assert reply["tombstone"]["gap_to"] == 30 and reply["tombstone"]["reason"] == "cap"
    assert columns(reply)[0] == list(range(31, 41))
    with pytest.raises(TopicsError) as err:
        c.scan("scan-none")
    assert err.value.code.wire == "topic_not_found"
    with pytest.raises(TopicsError) as err:
        c.scan("scan-cap", -1)
    assert err.value.code.wire == "invalid_request"
