"""Do a topic's copies agree? A digest per copy and seq range (shard/copy_checksum.py),
answered by any copy for itself, and its comparison across the in-sync replicas
(gateway/copy_compare.py): the leader's answer fixes the range the others are asked for,
and `agree` is false when a digest differs or a copy cannot answer."""

import asyncio

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.copy_compare import compare
from topics_actors.protocol.messages import Append, Checksum
from topics_actors.shard import copy_checksum

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), "t",
                       {"durability": "fsync"})
    yield pair
    pair.close()


def _write(pair, first: int, count: int) -> None:
    pair.leader.call(Append("t", [[b'{"n":%d}' % i, "tag", None, None]
                                  for i in range(first, first + count)], acks="leader"))


def _digest(harness, msg: Checksum) -> dict:
    reply = harness.call(msg)
    reply.pop("performance")
    return reply


def test_the_leader_and_its_follower_give_the_same_digest_over_the_same_range(pair):
    _write(pair, 1, 30)
    pair.rounds()
    lead, follow = (_digest(h, Checksum("t")) for h in (pair.leader, pair.follower))
    assert lead == follow                       # a follower answers for its own copy
    assert (lead["from_seq"], lead["to_seq"], lead["records"]) == (1, 30, 30)
    assert lead["next_from_seq"] is None and len(lead["checksum"]) == 16
    part = _digest(pair.follower, Checksum("t", 5, 9))
    assert (part["from_seq"], part["to_seq"], part["records"]) == (5, 9, 5)
    assert part["checksum"] != lead["checksum"]
    assert part == _digest(pair.leader, Checksum("t", 5, 9))


def test_a_long_range_is_walked_in_chunks(pair, monkeypatch):
    monkeypatch.setattr(copy_checksum, "CHECKSUM_RECORDS_MAX", 12)
    _write(pair, 1, 30)
    pair.rounds()
    first = pair.leader.call(Checksum("t"))
    assert (first["from_seq"], first["to_seq"], first["next_from_seq"]) == (1, 12, 13)
    assert first["until_seq"] == 30
    last = pair.leader.call(Checksum("t", 25, 30))
    assert (last["records"], last["next_from_seq"]) == (6, None)


def test_the_digest_covers_every_field_and_stops_at_the_watermark(pair):
    _write(pair, 1, 3)
    pair.rounds()
    _write(pair, 4, 2)                          # not fetched: above the follower's copy
    lead = pair.leader.call(Checksum("t"))
    assert lead["to_seq"] == lead["hw"] == 3    # by default up to the watermark
    assert pair.follower.call(Checksum("t", 1, 5))["to_seq"] == 3    # its own log end
    topic = pair.leader.core.registry.get("t")
    read = pair.leader.core.reader.read
    whole = copy_checksum.checksum(topic, read, 1, 3)["checksum"]

    def altered(**change):
        def reading(t, seq):
            rec = read(t, seq)
            return rec._replace(**change) if rec is not None and seq == 2 else rec
        return copy_checksum.checksum(topic, reading, 1, 3)["checksum"]
    for change in ({"ts": 1}, {"envelope": b'{"n":9}'}, {"tag": None}, {"node": "x"}):
        assert altered(**change) != whole, change
    with pytest.raises(TopicsError):
        pair.leader.call(Checksum("t", -1, 0))


class FakeEngine:
    """Node "a" of a cluster whose topic "t" is led by "b" with ISR b, a, c; `copies` is
    each node's answer (a digest or a TopicsError)."""

    def __init__(self, copies: dict):
        self.copies, self.asked = copies, []

    async def node_status(self) -> dict:
        nodes = {n: {"advertise": "127.0.0.1", "zmq_port": port} for port, n in enumerate("abc")}
        return {"cluster": {"node_id": "a", "nodes": nodes, "topics": {
            "t": {"leader": "b", "isr": ["b", "a", "c"], "replicas": ["b", "a", "c", "d"]}}}}

    def _answer(self, node: str, msg: Checksum) -> dict:
        self.asked.append((node, msg.from_seq, msg.to_seq))
        found = self.copies[node]
        if isinstance(found, TopicsError):
            raise found
        return {"from_seq": msg.from_seq or 1, "to_seq": msg.to_seq or 10, "records": 10,
                "checksum": found, "head_seq": 12, "hw": 10, "next_from_seq": None,
                "until_seq": 10}

    async def call(self, topic, msg) -> dict:
        return self._answer("a", msg)

    async def call_node(self, front, server_key, topic, msg) -> dict:
        return self._answer("abc"[int(front.rsplit(":", 1)[1])], msg)


def _compare(copies: dict) -> tuple[dict, list]:
    engine = FakeEngine(copies)
    return asyncio.run(compare(engine, "t", 0, 0)), engine.asked


def test_copies_that_agree_and_copies_that_do_not():
    same, asked = _compare({"a": "d1", "b": "d1", "c": "d1"})
    assert same["agree"] and set(same["copies"]) == {"a", "b", "c"}
    assert asked[0] == ("b", 0, 0)                         # the leader first, as asked
    assert sorted(asked[1:]) == [("a", 1, 10), ("c", 1, 10)]   # then its range, everywhere
    assert same["not_compared"] == ["d"] and same["isr"] == ["b", "a", "c"]
    differ, _ = _compare({"a": "d1", "b": "d1", "c": "d2"})
    assert not differ["agree"] and differ["copies"]["c"]["checksum"] == "d2"
    silent, _ = _compare({"a": "d1", "b": "d1",
                          "c": TopicsError("no answer", ErrorCode.NOT_READY)})
    assert not silent["agree"] and silent["copies"]["c"]["error"] == "not_ready"
