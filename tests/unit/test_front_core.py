"""The front's forwarding core, without sockets (supervisor/front_core.py, forward_table.py).

Method: a FrontCore fed a made-up shard map, client requests as the codec encodes them and
shard replies as a shard would send them; the effects (replies to peers, sends to shards)
are decoded and checked: routing, corr mapping, the prevalidated mark, deadlines, a shard
going down, the table's bound, and the list_topics gather.
"""

from __future__ import annotations

import pytest

from supervisor.forward_table import ForwardTable, Pending, TableFull
from supervisor.front_core import FORWARD_TIMEOUT_MS, FrontCore
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol import decode, decode_reply, encode, encode_error, encode_reply
from topics_actors.protocol.messages import (
    Absorbed, Append, Checkpoint, DeleteRouters, Diff, GetTopic, ListRouters, ListTopics,
    Status,
)
from topics_actors.topic_identity import shard_of_name

pytestmark = pytest.mark.timeout(30)
MS = 1_000_000


def shard_map(states=("ready", "ready"), incarnations=(1, 1)) -> dict:
    shards = [{"shard": i, "state": s, "pid": 100 + i, "incarnation": n,
               "endpoint": f"tcp://127.0.0.1:{5000 + i}", "ipc": f"ipc:///run/shard-{i:02d}",
               "replay_progress": 1.0} for i, (s, n) in enumerate(zip(states, incarnations))]
    return {"node_ready": all(s == "ready" for s in states), "replay_progress": 1.0,
            "shard_count": len(shards), "shards": shards, "processes": [], "pid": 1,
            "zmq_port": 4001, "http_port": 4000}


def core(**options) -> FrontCore:
    front = FrontCore(**options)
    front.update_map(shard_map())
    return front


def reply_of(raw: bytes):
    """(corr, body) of a reply, or (corr, error code) of an error."""
    try:
        return decode_reply(raw)
    except TopicsError as error:
        return error.corr, error.code.wire


def test_status_is_answered_with_the_map():
    front = core()
    effects = front.request(b"p", encode(Status(), 7), 0)
    assert effects.sends == []
    [(peer, raw)] = effects.replies
    assert peer == b"p" and reply_of(raw) == (7, shard_map())


def test_a_topic_request_goes_to_its_shard_and_the_reply_comes_back_under_the_client_corr():
    front = core()
    msg = GetTopic("orders")
    effects = front.request(b"peer-a", encode(msg, 42), 0)
    assert effects.replies == []
    [(shard, raw)] = effects.sends
    assert shard == shard_of_name("orders", 2)
    forward_corr, forwarded = decode(raw)
    assert forwarded == msg
    body = {"topic": "orders", "head_seq": 3, "performance": {}}
    [(peer, back)] = front.shard_reply(encode_reply(forward_corr, body)).replies
    assert peer == b"peer-a" and reply_of(back) == (42, body)
    assert front.shard_reply(encode_reply(forward_corr, body)).replies == []   # once only


def test_two_peers_with_the_same_corr_get_their_own_replies():
    front = core()
    sends = [front.request(peer, encode(GetTopic("t"), 1), 0).sends[0][1]
             for peer in (b"a", b"b")]
    corrs = [decode(raw)[0] for raw in sends]
    assert corrs[0] != corrs[1]
    got = [front.shard_reply(encode_reply(c, {"n": c})).replies[0] for c in reversed(corrs)]
    assert [(peer, reply_of(raw)) for peer, raw in got] == [
        (b"b", (1, {"n": corrs[1]})), (b"a", (1, {"n": corrs[0]}))]


def test_a_forwarded_append_never_carries_the_prevalidated_mark():
    front = core()
    msg = Append("t", [[b"not json", None, None, None]], prevalidated=True)
    [(_, raw)] = front.request(b"p", encode(msg, 3), 0).sends
    assert decode(raw)[1].prevalidated is False
    assert decode(raw)[1].records == msg.records


def test_an_error_from_the_shard_is_passed_on():
    front = core()
    [(_, raw)] = front.request(b"p", encode(GetTopic("gone"), 5), 0).sends
    error = TopicsError("no such topic", detail={"topic": "gone"})
    [(_, back)] = front.shard_reply(encode_error(decode(raw)[0], error)).replies
    assert reply_of(back)[0] == 5


@pytest.mark.parametrize("msg", [Checkpoint(), Absorbed(1)])
def test_requests_of_the_nodes_own_processes_are_refused(msg):
    effects = core().request(b"p", encode(msg, 9), 0)
    assert effects.sends == [] and reply_of(effects.replies[0][1]) == (9, "invalid_request")


def test_bad_bytes_are_answered_invalid_request():
    effects = core().request(b"p", b"\xc1junk", 0)
    assert effects.sends == [] and reply_of(effects.replies[0][1]) == (0, "invalid_request")


def test_a_shard_that_is_not_ready_is_answered_at_once():
    front = FrontCore()
    front.update_map(shard_map(states=("replaying", "replaying")))
    effects = front.request(b"p", encode(GetTopic("t"), 4), 0)
    assert effects.sends == [] and reply_of(effects.replies[0][1]) == (4, "not_ready")
    assert len(front.table) == 0


def test_an_unanswered_request_expires_with_not_ready():
    front = core(timeout_ms=100)
    front.request(b"p", encode(GetTopic("t"), 4), 0)
    assert front.expire(99 * MS).replies == []
    [(peer, raw)] = front.expire(100 * MS).replies
    assert peer == b"p" and reply_of(raw) == (4, "not_ready")
    assert len(front.table) == 0


def test_a_long_poll_gets_its_wait_on_top_of_the_timeout():
    front = core(timeout_ms=100)
    front.request(b"p", encode(Diff("t", wait_ms=1_000), 4), 0)
    assert front.expire(1_099 * MS).replies == []
    assert len(front.expire(1_100 * MS).replies) == 1


def test_a_shard_that_restarts_fails_its_requests_at_once():
    front = core()
    on_zero = next(n for n in ("a", "b", "c", "d") if shard_of_name(n, 2) == 0)
    on_one = next(n for n in ("a", "b", "c", "d") if shard_of_name(n, 2) == 1)
    front.request(b"p", encode(GetTopic(on_zero), 1), 0)
    front.request(b"p", encode(GetTopic(on_one), 2), 0)
    effects = front.update_map(shard_map(incarnations=(2, 1)))
    assert [reply_of(raw) for _, raw in effects.replies] == [(1, "not_ready")]
    assert len(front.table) == 1
    effects = front.update_map(shard_map(states=("ready", "down"), incarnations=(2, 1)))
    assert [reply_of(raw) for _, raw in effects.replies] == [(2, "not_ready")]


def test_a_request_that_could_not_be_sent_is_answered():
    front = core()
    [(_, raw)] = front.request(b"p", encode(GetTopic("t"), 8), 0).sends
    assert reply_of(front.unsent(raw).replies[0][1]) == (8, "not_ready")
    assert len(front.table) == 0


def test_the_table_is_bounded():
    front = core(capacity=2)
    for corr in (1, 2):
        assert front.request(b"p", encode(GetTopic("t"), corr), 0).sends
    effects = front.request(b"p", encode(GetTopic("t"), 3), 0)
    assert effects.sends == [] and reply_of(effects.replies[0][1]) == (3, "throttled")


def test_list_topics_asks_every_shard_and_merges_the_pages():
    front = core()
    sends = front.request(b"p", encode(ListTopics(limit=3), 6), 0).sends
    assert sorted(shard for shard, _ in sends) == [0, 1]
    pages = {0: ["a", "c", "e"], 1: ["b", "d"]}
    replies = []
    for shard, raw in sends:
        body = {"topics": [{"topic": n} for n in pages[shard]], "more": shard == 0,
                "performance": {}}
        replies += front.shard_reply(encode_reply(decode(raw)[0], body)).replies
    [(_, raw)] = replies
    corr, body = reply_of(raw)
    assert corr == 6 and [t["topic"] for t in body["topics"]] == ["a", "b", "c"]
    assert body["more"] is True


@pytest.mark.parametrize("msg, member", [(ListRouters(), "routers"),
                                         (DeleteRouters(source="s"), "deleted")])
def test_router_lists_and_deletes_ask_every_shard_and_join_the_answers(msg, member):
    front = core()
    sends = front.request(b"p", encode(msg, 7), 0).sends
    assert sorted(shard for shard, _ in sends) == [0, 1]
    replies = []
    for shard, raw in sends:
        body = {member: [f"r{shard}a", f"r{shard}b"], "performance": {}}
        replies += front.shard_reply(encode_reply(decode(raw)[0], body)).replies
    [(_, raw)] = replies
    corr, body = reply_of(raw)
    assert corr == 7 and sorted(body[member]) == ["r0a", "r0b", "r1a", "r1b"]


def test_list_topics_with_a_failing_shard_answers_the_error_once():
    front = core(timeout_ms=100)
    sends = front.request(b"p", encode(ListTopics(), 6), 0).sends
    first = decode(sends[0][1])[0]
    error = TopicsError("replaying", ErrorCode.NOT_READY, {"shard": 0})
    [(_, raw)] = front.shard_reply(encode_error(first, error)).replies
    assert reply_of(raw) == (6, "not_ready")
    assert front.expire(10**12).replies == []      # the other half expires silently


def test_forward_table_expiry_and_removal():
    table = ForwardTable(capacity=3)
    corrs = [table.add(Pending(b"p", i, i % 2, deadline_ns=10 * (i + 1))) for i in range(3)]
    assert len(set(corrs)) == 3
    with pytest.raises(TableFull):
        table.add(Pending(b"p", 9, 0, deadline_ns=1))
    assert table.take(corrs[0]).corr == 0 and table.take(corrs[0]) is None
    assert table.next_deadline_ns() == 20
    assert [p.corr for p in table.of_shards({1})] == [1]
    assert [p.corr for p in table.expired(1_000)] == [2] and len(table) == 0


def test_default_timeout_stays_below_the_library_request_timeout():
    from topics_actors.client.sync_client import Client
    import inspect
    default = inspect.signature(Client).parameters["request_timeout_ms"].default
    assert FORWARD_TIMEOUT_MS < default


def test_a_refused_request_is_answered_and_not_forwarded_unless_trusted():
    def authorize(identity, msg):
        if identity != "good":
            raise TopicsError("no", ErrorCode.FORBIDDEN)
    front = FrontCore(authorize=authorize)
    front.update_map(shard_map())
    effects = front.request(b"p", encode(GetTopic("t"), 3), 0, identity="bad")
    assert effects.sends == [] and reply_of(effects.replies[0][1]) == (3, "forbidden")
    assert front.request(b"p", encode(GetTopic("t"), 4), 0, identity="good").sends
    assert front.request(b"p", encode(GetTopic("t"), 5), 0, trusted=True).sends
