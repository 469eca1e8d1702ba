"""Clients that do not route: everything through the front, which forwards (a real node).

Method: a raw DEALER speaking the protocol to the front only; the blocking and asyncio
clients with route=False running the usual operations; a shard SIGKILLed while the front
holds a forwarded long poll for it (the client must hear an error, and a retrying client
must get through once the shard is back).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import zmq

from topics_actors.client import AsyncClient, TopicsError
from topics_actors.protocol import decode_reply, encode
from topics_actors.protocol.messages import Append, Diff, PutTopic
from tools.testing.node_harness import names_on
from tests.support import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def node(make_node):
    return make_node(shards=2, env={"TOPICS_WAL_FILE_BYTES": str(1 << 20)})


class Dealer:
    def __init__(self, endpoint: str):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, msg, corr: int) -> None:
        self.sock.send(encode(msg, corr))

    def reply(self, timeout_ms: int = 10_000):
        assert self.sock.poll(timeout_ms), "no reply from the front"
        [raw] = self.sock.recv_multipart()
        return decode_reply(raw)

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def test_a_raw_dealer_creates_appends_and_reads_through_the_front(node):
    dealer = Dealer(node.endpoint)
    try:
        for shard in (0, 1):   # a topic on each shard: both are reached through the front
            name = names_on(shard, 1, "raw")[0]
            dealer.send(PutTopic(name, {"durability": "fsync"}), 10 + shard)
            corr, body = dealer.reply()
            assert corr == 10 + shard and body["created"] is True
            dealer.send(Append(name, [[b'{"a":1}', "t", None, None], [b"2", None, None, None]]),
                        20 + shard)
            corr, body = dealer.reply()
            assert corr == 20 + shard and body["seqs"] == [1, 2]
            dealer.send(Diff(name, include_tags=True), 30 + shard)
            corr, body = dealer.reply()
            assert corr == 30 + shard and [r[0] for r in body["records"]] == [1, 2]
            assert body["records"][0][2] == b'{"d":{"a":1}}' and body["records"][0][3] == "t"
    finally:
        dealer.close()


def test_a_prevalidated_append_through_the_front_is_parsed(node):
    dealer = Dealer(node.endpoint)
    try:
        bad = Append("pv", [[b"{not json", None, None, None]], prevalidated=True)
        deadline, attempt = time.monotonic() + 10, 0
        while True:                     # not_ready: the front's link to that shard is still
            attempt += 1                # coming up; a client sends it again, so do we
            dealer.send(bad, attempt)
            with pytest.raises(TopicsError) as err:
                dealer.reply()
            if err.value.code.wire != "not_ready" or time.monotonic() > deadline:
                break
        assert err.value.code.wire == "invalid_request"
        statuses = node.client().shard_statuses()
        assert sum(s["statistics"]["trusted_appends"] for s in statuses) == 0
    finally:
        dealer.close()


def test_the_client_without_routing_does_what_the_routing_client_does(node):
    c = node.client(route=False)
    names = names_on(0, 2, "fw") + names_on(1, 2, "fw")
    for name in names:
        assert c.append(name, [{"data": {"n": name}, "tag": "x"}])["created"] is True
    assert [r["data"] for r in c.diff(names[2])["records"]] == [{"n": names[2]}]
    page = c.list_topics(prefix="fw", page_size=3)
    assert [t["topic"] for t in page["topics"]] == sorted(names)[:3] and page["next_cursor"]
    rest = c.list_topics(prefix="fw", page_size=3, cursor=page["next_cursor"])
    assert [t["topic"] for t in rest["topics"]] == sorted(names)[3:]
    assert "next_cursor" not in rest
    assert c.delete_records(names[0], match="x")["deleted"] == 1
    assert c.get_topic(names[0])["count"] == 0
    c.put_topic("fwq", type="queue")
    c.append("fwq", [{"data": 1}, {"data": 2}])
    jobs = c.claim("fwq", "worker", max=2)["claimed"]
    assert [j["data"] for j in jobs] == [1, 2]
    assert c.ack("fwq", "worker", [j["$seq"] for j in jobs])["acked_seqs"] == [1, 2]
    assert c.delete_topic(names[1])["deleted"] is True
    with pytest.raises(TopicsError) as err:
        c.shard_statuses()
    assert err.value.code.wire == "invalid_request"


def test_the_async_client_without_routing(node):
    async def run():
        async with AsyncClient(node.endpoint, route=False, request_timeout_ms=3_000) as c:
            results = await asyncio.gather(*(c.append(f"as{i}", [{"data": i}])
                                             for i in range(20)))
            assert all(r["seqs"] == [1] for r in results)
            page = await c.list_topics(prefix="as", page_size=100)
            assert len(page["topics"]) == 20
            assert (await c.diff("as7"))["records"][0]["data"] == 7
    asyncio.run(run())


def test_a_shard_killed_mid_forward_is_an_error_then_a_retry_gets_through(node):
    name = names_on(1, 1, "kill")[0]
    c = node.client(route=False, retry_deadline_ms=30_000)
    c.put_topic(name, durability="fsync")      # seqs survive a kill without a gap
    c.append(name, [{"data": 1}])
    routing = node.client()
    dealer = Dealer(node.endpoint)
    try:
        dealer.send(Diff(name, from_seq=1, wait_ms=25_000), 5)   # parked at the shard
        wait_for(lambda: routing.shard_statuses()[1]["long_polls"] == 1, 10,
                 "the forwarded long poll parked at the shard")
        os.kill(node.shard_pid(1), signal.SIGKILL)
        with pytest.raises(TopicsError) as err:   # an answer well before the poll's 25 s
            dealer.reply(timeout_ms=10_000)
        assert err.value.code.wire == "not_ready" and err.value.detail["shard"] == 1
    finally:
        dealer.close()
    assert c.append(name, [{"data": 2}])["seqs"] == [2]   # retried until the shard is back
    wait_for(lambda: node.status()["node_ready"], 30, "the shard's restart")
