"""The gateway's append path: the cheap look for long digit runs before json_rules'
integer check, and the coalescing of concurrent appends to one topic
(gateway/append_coalescer.py). Method: the prefilter against json_rules itself on bodies
with digit runs in every position; the coalescer against a fake engine whose replies and
refusals are scripted, checking what each caller gets against what it would get alone."""

import asyncio
import itertools

import orjson

import pytest

from topics_actors import json_rules
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.append_body import parse_append
from topics_actors.gateway.append_coalescer import AppendCoalescer, CoalescerStatistics
from topics_actors.protocol.messages import Append



def _join(appends: AppendCoalescer, msg, batchable: bool, wire_bytes: int):
    """appends.append for a list-form Append (its records counted as they come)."""
    return appends.append(msg, batchable, wire_bytes, len(msg.records))

def _outcome(check, text: bytes):
    try:
        check(text, "the body")
    except TopicsError as error:
        return error.code, error.message
    return None


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", [
    b'{"a":1}', b'{"a":1234567890123456789}', b'{"a":18446744073709551615}',
    b'{"a":18446744073709551616}', b'{"a":-9223372036854775809}',
    b'{"a":"123456789012345678901234"}', b'{"a":[1,2,3],"b":12345678901234567890123}',
    b'{"a":1.12345678901234567890123}', b'{"a":123456789012345678}',
    b'{"x":"' + b"9" * 18 + b'","y":' + b"9" * 25 + b"}",
])
def test_the_digit_run_prefilter_decides_as_json_rules_does(text):
    assert _outcome(rb.check_integers, text) == _outcome(json_rules.check_integers, text)


# --- the coalescer --------------------------------------------------------------------------

class ScriptedShard:
    """Answers Appends like a shard (contiguous seqs from 1), each call held until
    `release()`; `refuse(data)` refuses any append holding that data."""

    def __init__(self):
        self.sent: list[Append] = []
        self.head = 0
        self.gates: list[asyncio.Event] = []
        self.refused: dict[bytes, TopicsError] = {}

    async def call(self, topic, msg):
        self.sent.append(msg)
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        records = msg.records
        if type(records) is bytes:           # the array form: its elements are the datas
            records = [[orjson.dumps(value)] for value in orjson.loads(records)]
        for rec in records:
            if rec[0] in self.refused:
                raise self.refused[rec[0]]
        first = self.head + 1
        self.head += len(records)
        reply = {"topic": topic, "first_seq": first, "last_seq": self.head,
                 "head_seq": self.head, "count": len(records), "created": first == 1,
                 "deduped": False, "performance": {"fsync_ms": 0.1}}
        if msg.return_seqs:
            reply["seqs"] = list(range(first, self.head + 1))
        return reply

    async def release(self):
        """Let every call made so far answer, then let the loop run their follow-ups."""
        for gate in self.gates:
            gate.set()
        for _ in range(5):
            await asyncio.sleep(0)


def _append(data: bytes, count: int = 1, return_seqs: bool = True, key: str = "fb",
            create=None) -> Append:
    return Append("t", [[data]] * count, None, key, create, None, return_seqs,
                  prevalidated=True)


def _coalescer(shard, **limits) -> AppendCoalescer:
    keys = itertools.count(1)
    return AppendCoalescer(shard.call, lambda: f"s:{next(keys)}", **limits)


@pytest.mark.timeout(10)
def test_appends_during_a_round_trip_leave_together_and_get_their_own_replies():
    async def scenario():
        shard = ScriptedShard()
        appends = _coalescer(shard)
        first = _append(b"1")
        tasks = [asyncio.ensure_future(_join(appends, first, True, 20))]
        await asyncio.sleep(0)
        tasks += [asyncio.ensure_future(_join(appends, _append(b"2", 2), True, 40)),
                  asyncio.ensure_future(_join(appends, _append(b"3", 1, False), True, 20)),
                  asyncio.ensure_future(_join(appends, _append(b"4"), True, 20))]
        await asyncio.sleep(0)
        assert shard.sent == [first]          # a lone append goes at once, as it was built
        await shard.release()
        await shard.release()
        replies = await asyncio.gather(*tasks)
        return shard, appends, replies

    shard, appends, replies = asyncio.run(scenario())
    assert len(shard.sent) == 2
    batch = shard.sent[1]
    assert batch.records == [[b"2"], [b"2"], [b"3"], [b"4"]]
    assert batch.idempotency_key == "s:1" and batch.prevalidated and not batch.return_seqs
    assert replies[0]["seqs"] == [1] and replies[0]["created"]
    assert [(r["first_seq"], r["last_seq"], r["count"], r["created"]) for r in replies[1:]] \
        == [(2, 3, 2, False), (4, 4, 1, False), (5, 5, 1, False)]
    assert replies[1]["seqs"] == [2, 3] and "seqs" not in replies[2]
    assert replies[3]["seqs"] == [5] and replies[3]["head_seq"] == 5
    assert replies[3]["performance"] == {"fsync_ms": 0.1}
    assert replies[1]["performance"] is not replies[3]["performance"]
    assert appends.statistics() == CoalescerStatistics(4, 2, 0)


@pytest.mark.timeout(10)
def test_an_append_that_may_not_join_goes_alone_and_limits_cut_batches():
    async def scenario():
        shard = ScriptedShard()
        appends = _coalescer(shard, records_max=3, bytes_max=1_000)
        tasks = [asyncio.ensure_future(_join(appends, _append(b"a"), True, 20))]
        await asyncio.sleep(0)
        keyed = _append(b"k", key="client-key")
        tasks.append(asyncio.ensure_future(_join(appends, keyed, False, 20)))
        big = _append(b"b", 4)
        tasks.append(asyncio.ensure_future(_join(appends, big, True, 80)))
        tasks += [asyncio.ensure_future(_join(appends, _append(d, 2), True, 40))
                  for d in (b"c", b"d", b"e")]
        await asyncio.sleep(0)
        assert shard.sent == [shard.sent[0], keyed, big]   # alone, at once
        for _ in range(4):
            await shard.release()
        await asyncio.gather(*tasks)
        return shard

    shard = asyncio.run(scenario())
    assert [m.records for m in shard.sent[3:]] == [[[b"c"], [b"c"]], [[b"d"], [b"d"]],
                                                   [[b"e"], [b"e"]]]


@pytest.mark.timeout(10)
def test_a_batch_refused_for_its_content_is_sent_again_one_caller_at_a_time():
    async def scenario():
        shard = ScriptedShard()
        shard.refused[b"bad"] = TopicsError("record too large", ErrorCode.RECORD_TOO_LARGE)
        appends = _coalescer(shard)
        tasks = [asyncio.ensure_future(_join(appends, _append(b"0"), True, 20))]
        await asyncio.sleep(0)
        good, bad = _append(b"good"), _append(b"bad")
        tasks += [asyncio.ensure_future(_join(appends, good, True, 20)),
                  asyncio.ensure_future(_join(appends, bad, True, 20))]
        for _ in range(4):
            await shard.release()
        return shard, appends, await asyncio.gather(*tasks, return_exceptions=True)

    shard, appends, outcomes = asyncio.run(scenario())
    assert shard.sent[2:] == [_append(b"good"), _append(b"bad")]   # each as it was built
    assert outcomes[1]["seqs"] == [2]
    assert isinstance(outcomes[2], TopicsError)
    assert outcomes[2].code == ErrorCode.RECORD_TOO_LARGE
    assert appends.statistics().split_batches == 1


@pytest.mark.timeout(10)
def test_any_other_refusal_is_every_callers_own_copy_and_a_caller_gone_is_dropped():
    async def scenario():
        shard = ScriptedShard()
        appends = _coalescer(shard)
        tasks = [asyncio.ensure_future(_join(appends, _append(b"0"), True, 20))]
        await asyncio.sleep(0)
        tasks += [asyncio.ensure_future(_join(appends, _append(d), True, 20))
                  for d in (b"1", b"2", b"3")]
        await asyncio.sleep(0)
        tasks[2].cancel()                      # its client went away while it waited
        shard.refused[b"1"] = TopicsError("no such topic", ErrorCode.TOPIC_NOT_FOUND)
        for _ in range(3):
            await shard.release()
        return shard, await asyncio.gather(*tasks, return_exceptions=True)

    shard, outcomes = asyncio.run(scenario())
    assert shard.sent[1].records == [[b"1"], [b"3"]]
    assert isinstance(outcomes[2], asyncio.CancelledError)
    one, three = outcomes[1], outcomes[3]
    assert one.code == three.code == ErrorCode.TOPIC_NOT_FOUND and one is not three


@pytest.mark.timeout(10)
def test_arrays_join_into_one_array_and_lists_go_in_a_lane_of_their_own():
    """The array form (docs/PROTOCOL.md 6.1), what parse_append builds for plain records:
    waiting arrays leave as one array, a list-form append waiting meanwhile separately;
    each caller's reply is cut by its own count."""
    body = {"records": [{"data": {"n": 1}}, {"data": [2]}]}
    plan = parse_append("t", body, None, True, "fb")
    assert plan.message.records == b'[{"n":1},[2]]' and plan.count == 2
    tagged = parse_append("t", {"records": [{"data": 3, "tag": "x"}]}, None, True, "fb")
    assert tagged.message.records == [[b"3", "x", None, None]] and tagged.count == 1

    async def scenario():
        shard = ScriptedShard()
        appends = _coalescer(shard)
        first = parse_append("t", {"records": [{"data": 0}]}, None, True, "fb").message
        tasks = [asyncio.ensure_future(appends.append(first, True, 20, 1))]
        await asyncio.sleep(0)
        tasks += [asyncio.ensure_future(appends.append(plan.message, True, 40, 2)),
                  asyncio.ensure_future(appends.append(tagged.message, True, 20, 1)),
                  asyncio.ensure_future(appends.append(plan.message, True, 40, 2))]
        for _ in range(3):
            await shard.release()
        return shard, await asyncio.gather(*tasks)

    shard, replies = asyncio.run(scenario())
    assert [m.records for m in shard.sent] == [b"[0]", [[b"3", "x", None, None]],
                                               b'[{"n":1},[2],{"n":1},[2]]']
    assert [(r["first_seq"], r["last_seq"]) for r in replies] == [(1, 1), (3, 4), (2, 2),
                                                                 (5, 6)]


def test_acks_takes_the_values_of_the_closed_set_and_nothing_else():
    for acks in ("none", "leader", "all"):
        assert parse_append("t", {"records": [{"data": 1}], "acks": acks}, None, False,
                            "fb").message.acks == acks
    with pytest.raises(TopicsError, match="must be one of none, leader, all") as refused:
        parse_append("t", {"records": [{"data": 1}], "acks": "most"}, None, False, "fb")
    assert refused.value.code is ErrorCode.INVALID_REQUEST
