"""Operations through the ZeroMQ client against a real node (supervisor + 2 shards).

Method: one node per test module where state does not matter, fresh nodes where it does.
"""

from __future__ import annotations

import asyncio

import msgpack
import pytest
import zmq

from topics_actors.client import AsyncClient, TopicsError
from topics_actors.protocol.envelope import PROTOCOL_VERSION
from tools.testing.node_harness import names_on
from tests.support import wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def node(make_node):
    return make_node(shards=2)


def test_put_get_delete_topic(node):
    c = node.client()
    created = c.put_topic("orders", durability="fsync", cap_records=10)
    assert created["created"] is True
    assert created["config"]["durable"] is True and created["config"]["cap_records"] == 10
    assert c.put_topic("orders", durability="fsync", cap_records=10)["created"] is False
    state = c.get_topic("orders")
    assert (state["head_seq"], state["next_seq"], state["earliest_seq"]) == (0, 1, 1)
    assert state["count"] == 0
    assert state["config"]["durability"] == "fsync"
    with pytest.raises(TopicsError) as err:
        c.put_topic("orders", type="queue")
    assert err.value.code.wire == "topic_exists_incompatible" and err.value.status == 409
    c.append("orders", [{"data": 1}])
    with pytest.raises(TopicsError) as err:
        c.delete_topic("orders", if_empty=True)
    assert err.value.code.wire == "topic_not_empty"
    assert c.delete_topic("orders")["deleted"] is True
    assert c.delete_topic("orders")["deleted"] is False
    with pytest.raises(TopicsError) as err:
        c.get_topic("orders")
    assert err.value.code.wire == "topic_not_found" and err.value.detail == {"topic": "orders"}


def test_append_and_diff_fields(node):
    c = node.client()
    r = c.append("events", [{"data": {"a": 1}, "tag": "x", "node": "n1", "meta": {"k": "v"}},
                            {"data": None}, {"data": "s", "tag": "y"}])
    assert (r["seqs"], r["first_seq"], r["last_seq"], r["head_seq"]) == ([1, 2, 3], 1, 3, 3)
    assert r["created"] is True and r["deduped"] is False and r["count"] == 3
    assert set(r["performance"]) >= {"server_total_ms", "wal_append_ms", "fsync_ms"}
    d = c.diff("events", include_tags=True)
    assert [x["$seq"] for x in d["records"]] == [1, 2, 3]
    assert d["records"][0] == {"$seq": 1, "$ts": d["records"][0]["$ts"], "$node": "n1",
                               "$tag": "x", "data": {"a": 1}, "meta": {"k": "v"}}
    assert d["records"][1] == {"$seq": 2, "$ts": d["records"][1]["$ts"], "data": None}
    assert (d["next_from_seq"], d["head_seq"], d["lag"], d["tombstone"]) == (3, 3, 0, None)
    assert d["caught_up"] is True
    plain = c.diff("events", include_meta=False)["records"]
    assert "meta" not in plain[0] and "$tag" not in plain[0]
    page = c.diff("events", from_seq=1, limit=1)
    assert [x["$seq"] for x in page["records"]] == [2]
    assert page["lag"] == 1 and not page["caught_up"]
    assert [x["$seq"] for x in c.diff("events", node="n1")["records"]] == [2, 3]


def test_recreated_topic_tombstone(node):
    c = node.client()
    c.append("re", [{"data": i} for i in range(5)])
    c.delete_topic("re")
    assert c.append("re", [{"data": "new"}])["seqs"] == [1]
    d = c.diff("re", from_seq=5)
    assert d["tombstone"]["reason"] == "recreated"
    assert (d["tombstone"]["gap_from"], d["tombstone"]["gap_to"]) == (1, 1)
    assert [x["data"] for x in d["records"]] == ["new"]


def test_bad_input_changes_nothing(node):
    c = node.client()
    c.append("strict", [{"data": 1}])
    cases = [
        (lambda: c.append("strict", []), "invalid_request"),
        (lambda: c.append("strict", [{"data": 1}] * 10_001), "batch_too_large"),
        (lambda: c.append("strict", [{"data": "x" * 1_048_577}]), "record_too_large"),
        (lambda: c.append("strict", [{"data": 1, "tag": "t" * 257}]), "invalid_request"),
        (lambda: c.append("strict", [{"data": 1, "meta": {str(i): i for i in range(65)}}]),
         "invalid_request"),
        (lambda: c.append("bad name!", [{"data": 1}]), "invalid_request"),
        (lambda: c.append("absent", [{"data": 1}], create=False), "topic_not_found"),
        (lambda: c.put_topic("cfg", ttl_ms=-1), "invalid_request"),
        (lambda: c.put_topic("cfg", durability="sometimes"), "invalid_request"),
        (lambda: c.diff("absent"), "topic_not_found"),
    ]
    for call, code in cases:
        with pytest.raises(TopicsError) as err:
            call()
        assert err.value.code.wire == code
    state = c.get_topic("strict")
    assert (state["head_seq"], state["count"]) == (1, 1)
    assert [t["topic"] for t in c.list_topics()["topics"]] == ["strict"]


def test_list_topics_merges_shards_in_name_order(node):
    c = node.client()
    names = sorted(names_on(0, 6, "l") + names_on(1, 6, "l"))
    for name in names:
        c.put_topic(name)
    c.put_topic("other")
    seen, cursor = [], None
    while True:
        page = c.list_topics(prefix="l", page_size=5, cursor=cursor)
        seen += [t["topic"] for t in page["topics"]]
        cursor = page.get("next_cursor")
        if cursor is None:
            break
    assert seen == names
    with pytest.raises(TopicsError) as err:
        c.list_topics(cursor="not base64!")
    assert err.value.code.wire == "invalid_request"


def test_idempotency_key_returns_original_seqs(node):
    c = node.client()
    first = c.append("idem", [{"data": 1}, {"data": 2}], idempotency_key="k-1")
    c.append("idem", [{"data": 3}])
    again = c.append("idem", [{"data": "ignored"}], idempotency_key="k-1")
    assert again["deduped"] is True and again["seqs"] == first["seqs"] == [1, 2]
    assert c.get_topic("idem")["head_seq"] == 3


def test_async_client_concurrent_appends(node):
    async def run():
        async with AsyncClient(node.endpoint) as ac:
            replies = await asyncio.gather(*(ac.append(f"a{i % 4}", [{"data": i}])
                                             for i in range(400)))
            heads = [(await ac.get_topic(f"a{i}"))["head_seq"] for i in range(4)]
            listing = await ac.list_topics(prefix="a")
            return replies, heads, listing
    replies, heads, listing = asyncio.run(run())
    assert heads == [100, 100, 100, 100]
    per_topic = {}
    for r in replies:
        per_topic.setdefault(r["topic"], []).extend(r["seqs"])
    assert all(sorted(seqs) == list(range(1, 101)) for seqs in per_topic.values())
    assert [t["topic"] for t in listing["topics"]] == ["a0", "a1", "a2", "a3"]


def test_malformed_messages_get_error_replies(node):
    shard_endpoint = node.status()["shards"][0]["endpoint"]
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(shard_endpoint)
    try:
        bad = [b"\xc1garbage", msgpack.packb([PROTOCOL_VERSION, "nope", 5, {}]),
               msgpack.packb([9, "diff", 6, {"topic": "x"}]),
               msgpack.packb([PROTOCOL_VERSION, "append", 7, {"topic": 1, "records": []}])]
        for raw in bad:
            sock.send(raw)
            assert sock.poll(5000), "no reply to a malformed message"
            version, kind, corr, body = msgpack.unpackb(sock.recv_multipart()[0])
            assert kind == "error" and body["code"] == "invalid_request"
    finally:
        sock.close(0)
    c = node.client()
    assert c.append("still-serving", [{"data": 1}])["seqs"] == [1]


def test_long_poll_is_woken_by_an_append(node):
    import threading
    import time
    c = node.client()
    c.append("lp", [{"data": 0}])
    result = {}

    def wait():
        started = time.monotonic()
        result["page"] = node.client().diff("lp", from_seq=1, wait_ms=10_000)
        result["elapsed"] = time.monotonic() - started
    reader = threading.Thread(target=wait)
    reader.start()
    wait_for(lambda: sum(s["long_polls"] for s in c.shard_statuses()) == 1, 10,
             "the read to be parked")
    assert "page" not in result, "a caught-up long poll answered before any append"
    c.append("lp", [{"data": "wake"}])
    reader.join(15)
    assert [r["data"] for r in result["page"]["records"]] == ["wake"]
    assert result["elapsed"] < 5, "the long poll was not woken by the append"
    started = time.monotonic()
    idle = c.diff("lp", from_seq=2, wait_ms=300)
    assert idle["records"] == [] and idle["caught_up"] and time.monotonic() - started >= 0.3


def test_bad_diff_arguments_are_rejected_and_the_shard_keeps_serving(node):
    c = node.client()
    c.append("args", [{"data": 1}])
    for kwargs in ({"node": 5}, {"node": ["ok", 7]}, {"from_seq": -1}, {"limit": -2},
                   {"wait_ms": -1}):
        with pytest.raises(TopicsError) as err:
            c.diff("args", **kwargs)
        assert err.value.code.wire == "invalid_request", kwargs
    assert c.diff("args")["head_seq"] == 1


def test_a_request_for_another_shards_topic_is_refused(node):
    theirs = names_on(1, 1, "m")[0]
    c = node.client()
    c.append(theirs, [{"data": 1}])
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(node.status()["shards"][0]["endpoint"])
    try:
        sock.send(msgpack.packb([PROTOCOL_VERSION, "append", 3,
                                 {"topic": theirs, "records": [[b"2"]]}]))
        assert sock.poll(5000)
        _, kind, corr, body = msgpack.unpackb(sock.recv_multipart()[0])
    finally:
        sock.close(0)
    assert (kind, corr, body["code"]) == ("error", 3, "not_ready")
    assert body["detail"]["reason"] == "wrong_shard"
    assert c.get_topic(theirs)["head_seq"] == 1


@pytest.mark.timeout(60)
def test_reclaimer_applies_ttl_to_an_idle_topic(make_node):
    """No read or write touches the topic: only the reclaimer can move its TTL floor."""
    node = make_node(shards=2, env={"TOPICS_RECLAIM_INTERVAL_MS": "200"})
    c = node.client()
    c.put_topic("idle-ttl", ttl_ms=300, durable=True)
    c.append("idle-ttl", [{"data": i} for i in range(3)])

    def count() -> int:   # list_topics reports state without applying retention itself
        return next(t["count"] for t in c.list_topics(prefix="idle-ttl")["topics"])
    assert count() == 3
    wait_for(lambda: count() == 0, 20, "the reclaimer to expire the records")
    reply = c.diff("idle-ttl")
    assert reply["tombstone"]["reason"] == "ttl" and reply["tombstone"]["gap_to"] == 3
    # the reclaimer logs once its pass over every shard is done: after the floor moved
    wait_for(lambda: "event=reclaimed" in node.log(), 10, "the reclaimer to log its pass")
