"""Planning, offsets and options of the Spark source, pure: no Spark, no node.

Goal: the ranges a batch or a micro-batch reads are exactly the seqs the offsets and
pushed filters ask for, split by seqsPerPartition; offsets are canonical and round-trip;
per-trigger budgets are respected and shared fairly; bad options fail with their name.
"""

from __future__ import annotations

import json

import pytest

from topics_actors.spark.offsets import (
    SEQ_MAX, OffsetSpec, decode_offset, encode_offset, resolve,
)
from topics_actors.spark.options import (
    OptionError, parse_offset_spec, reader_options, writer_options,
)
from topics_actors.spark.planning import (
    Selection, SeqRange, TopicBounds, admit, plan_batch, plan_stream, split_range,
)

pytestmark = pytest.mark.timeout(10)

BOUNDS = {"a": TopicBounds(1, 250), "b": TopicBounds(31, 40), "e": TopicBounds(1, 0)}


def seqs_of(ranges: list[SeqRange]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in ranges:
        out.setdefault(r.topic, []).extend(range(r.after_seq + 1, r.until_seq + 1))
    return out


def test_split_covers_the_range_without_overlap():
    ranges = split_range("t", 10, 255, 100)
    assert [(r.after_seq, r.until_seq) for r in ranges] == [(10, 110), (110, 210), (210, 255)]
    assert split_range("t", 5, 5, 100) == [] and split_range("t", 9, 5, 100) == []


def test_batch_plan_from_earliest_to_latest():
    ranges = plan_batch(BOUNDS, OffsetSpec("earliest"), OffsetSpec("latest"), 100)
    assert seqs_of(ranges) == {"a": list(range(1, 251)), "b": list(range(31, 41))}
    assert all(r.size <= 100 for r in ranges) and len(ranges) == 4


def test_batch_plan_with_json_offsets_is_clipped_to_the_head():
    starting = parse_offset_spec('{"a": 100, "b": -2}', "startingOffsets", "earliest")
    ending = parse_offset_spec('{"a": 120, "b": 999}', "endingOffsets", "latest")
    ranges = plan_batch(BOUNDS, starting, ending, 100)
    assert seqs_of(ranges) == {"a": list(range(101, 121))}      # b: latest .. head = nothing


def test_a_start_below_earliest_is_kept_so_the_reader_sees_the_gap():
    starting = parse_offset_spec('{"b": 0}', "startingOffsets", "earliest")
    ranges = plan_batch(BOUNDS, starting, OffsetSpec("latest"), 1000)
    assert [r for r in ranges if r.topic == "b"] == [SeqRange("b", 0, 40)]


def test_pushed_filters_narrow_topics_and_seqs():
    selection = Selection().only(["a", "b"]).only(["a"]).seqs(">=", 50).seqs("<", 60)
    ranges = plan_batch(BOUNDS, OffsetSpec("earliest"), OffsetSpec("latest"), 100, selection)
    assert seqs_of(ranges) == {"a": list(range(50, 60))}
    exact = Selection().seqs("=", 7).seqs(">", 3).seqs("<=", 9)
    assert seqs_of(plan_batch(BOUNDS, OffsetSpec("earliest"), OffsetSpec("latest"), 100,
                              exact)) == {"a": [7]}


def test_stream_plan_is_deterministic_and_reads_only_the_new_seqs():
    start, end = {"a": 10, "b": 40}, {"a": 35, "b": 40}
    ranges = plan_stream(start, end, 10)
    assert ranges == plan_stream(start, end, 10)
    assert seqs_of(ranges) == {"a": list(range(11, 36))}


def test_admit_shares_the_budget_fairly_and_never_exceeds_it():
    start = {"a": 0, "b": 0, "c": 0}
    latest = {"a": 1000, "b": 5, "c": 1000}
    end = admit(start, latest, 101)
    assert end["b"] == 5 and sum(end[t] - start[t] for t in end) == 101
    assert abs(end["a"] - end["c"]) <= 1
    assert admit(start, latest, None) == latest
    assert admit({"a": 10}, {"a": 4}, 50) == {"a": 10}           # never backwards
    assert admit(start, latest, 10_000) == latest


def test_offsets_are_canonical_and_round_trip():
    offset = encode_offset({"b": 2, "a": SEQ_MAX})
    assert json.dumps(offset) == '{"v": 1, "topics": {"a": %d, "b": 2}}' % SEQ_MAX
    assert decode_offset(json.loads(json.dumps(offset))) == {"a": SEQ_MAX, "b": 2}
    for bad in ({"v": 2, "topics": {}}, {"v": 1, "topics": {"a": -1}}, {"topics": {}}):
        with pytest.raises(ValueError):
            decode_offset(bad)


def test_resolve_earliest_latest_and_seqs():
    assert resolve(OffsetSpec("earliest"), "t", 31, 40, False) == 30
    assert resolve(OffsetSpec("latest"), "t", 31, 40, False) == 40
    spec = OffsetSpec("earliest", (("t", 50),))
    assert resolve(spec, "t", 31, 40, False) == 50
    assert resolve(spec, "t", 31, 40, True) == 40


def test_reader_options_defaults_and_errors():
    options = reader_options({"topics": " b, a ,a", "url": "tcp://h:1"})
    assert options.topics == ("a", "b") and options.fail_on_data_loss is True
    assert options.starting == OffsetSpec("earliest") and options.pushdown is False
    checkpointed = reader_options({"topics": "a", "startingoffsets":
                                   json.dumps(encode_offset({"a": 7}))})
    assert checkpointed.starting.get("a") == 7
    for bad, name in [({"url": "tcp://h:1"}, "topics"), ({"topics": "a", "url": "x"}, "url"),
                      ({"topics": "a", "seqsperpartition": "0"}, "seqsPerPartition"),
                      ({"topics": "a", "failondataloss": "maybe"}, "failOnDataLoss"),
                      ({"topics": "a", "startingoffsets": "{bad"}, "startingOffsets"),
                      ({"topics": "a", "endingoffsets": '{"a": "x"}'}, "endingOffsets")]:
        with pytest.raises(OptionError, match=name):
            reader_options(bad)


def test_writer_options_make_one_id_per_batch_write_and_none_for_streams():
    first, second = writer_options({"topic": "t"}), writer_options({"topic": "t"})
    assert first.write_id and first.write_id != second.write_id
    assert writer_options({"topic": "t", "writeid": "job-7"}).write_id == "job-7"
    assert writer_options({}, fresh_id=False).write_id == ""
    with pytest.raises(OptionError, match="batchSize"):
        writer_options({"batchsize": "20000"})
    with pytest.raises(OptionError, match="writeId"):
        writer_options({"writeid": "a:b"})
