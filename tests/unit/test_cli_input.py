"""The pure parts of the `topics` verbs: records from arguments or stdin lines, server-sent
events from a byte stream, and the count an ack reply carries in either shape."""

from __future__ import annotations

import io

import pytest

from topics_actors.cli.event_stream import events
from topics_actors.cli.record_input import BadRecord, build_records, chunks, parse_datas
from topics_actors.cli.work_verbs import settled

pytestmark = pytest.mark.timeout(10)


def test_each_text_is_one_records_data_and_blank_lines_are_skipped():
    assert parse_datas(['{"a":1}', '"x"', "3", "null"], "argument") == [{"a": 1}, "x", 3, None]
    assert parse_datas(["[1]\n", "\n", "  \n", "true\n"], "line") == [[1], True]
    assert build_records([1, 2], "t", None) == [{"data": 1, "tag": "t"}, {"data": 2, "tag": "t"}]
    assert build_records([1], None, "n") == [{"data": 1, "node": "n"}]


def test_a_bad_text_names_where_it_is():
    with pytest.raises(BadRecord, match="argument 2 is not JSON"):
        parse_datas(["1", "{bad"], "argument")
    with pytest.raises(BadRecord, match="line 3 is not JSON"):
        parse_datas(["1\n", "\n", "nope\n"], "line")
    with pytest.raises(BadRecord):
        parse_datas([""], "argument")     # an empty argument is not a record


def test_chunks_keep_order_and_the_api_limit():
    records = [{"data": n} for n in range(25_001)]
    parts = chunks(records)
    assert [len(p) for p in parts] == [10_000, 10_000, 5_001]
    assert [r for p in parts for r in p] == records


def test_events_are_framed_by_blank_lines_and_comments_skipped():
    raw = (b"retry: 2000\n\n: hb 1\n\nevent: record\nid: c1\ndata: {\"a\":1}\n\n"
           b"data: x\ndata: y\n\nevent: caught-up\r\ndata: {}\r\n\r\nevent: cut\ndata: z")
    assert list(events(io.BytesIO(raw))) == [("record", "c1", '{"a":1}'),
                                             ("message", None, "x\ny"),
                                             ("caught-up", None, "{}")]


def test_settled_reads_a_count_or_a_list():
    assert settled({"acked": 2}, "acked") == 2
    assert settled({"acked": [4, 5, 6]}, "acked") == 3
    assert settled({}, "nacked") == 0
