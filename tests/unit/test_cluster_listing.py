"""GET /v0/topics on a cluster node lists the whole cluster (gateway/topic_listing.py): the
node's own topics merged with the cluster's topic states, a topic led elsewhere described
by its leader, pages that skip no name although the node's own listing is paged too, and
topics no leader can describe named as unavailable rather than dropped unseen."""

import asyncio

import pytest

from topics_actors.client.request_shapes import decode_cursor, encode_cursor
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.topic_listing import list_page

pytestmark = pytest.mark.timeout(30)


def _summary(name: str, head: int) -> dict:
    return {"topic": name, "head_seq": head, "earliest_seq": 1, "count": head, "bytes": 0,
            "durable": False, "effective_priority": 0, "durability": "disk"}


class FakeEngine:
    """This node "a" holds `own`; the cluster's states name each topic's leader; the
    leaders' answers are `remote` (a dict, or a TopicsError)."""

    def __init__(self, own: dict, leaders: dict, remote: dict, cluster: bool = True):
        self.own, self.leaders, self.remote, self.cluster = own, leaders, remote, cluster
        self.asked: list[str] = []

    async def node_status(self) -> dict:
        if not self.cluster:
            return {}
        return {"cluster": {"node_id": "a", "topics": {
            name: {"leader": leader} for name, leader in self.leaders.items()}}}

    async def list_topics(self, prefix, size, cursor, touch) -> dict:
        after = decode_cursor(cursor)
        names = sorted(n for n in self.own if n.startswith(prefix) and n > after)
        page = {"topics": [_summary(n, self.own[n]) for n in names[:size]]}
        if len(names) > size:
            page["next_cursor"] = encode_cursor(names[size - 1])
        return page

    async def call(self, name, msg) -> dict:
        self.asked.append(name)
        reply = self.remote[name]
        if isinstance(reply, TopicsError):
            raise reply
        return {"topic": name, "head_seq": reply, "earliest_seq": 1, "count": reply,
                "bytes": 0, "effective_priority": 0,
                "config": {"durable": True, "durability": "fsync"}}


def _walk(engine, size: int, prefix: str = "") -> tuple[list[tuple[str, int]], list[str]]:
    """Every page in turn: [(name, head_seq)] and the names said unavailable."""
    seen, unavailable, cursor = [], [], None
    for _ in range(50):
        params = {"page_size": str(size), "prefix": prefix}
        if cursor:
            params["cursor"] = cursor
        page = asyncio.run(list_page(engine, None, params))
        seen += [(t["topic"], t["head_seq"]) for t in page["topics"]]
        unavailable += page.get("unavailable", [])
        cursor = page.get("next_cursor")
        if not cursor:
            return seen, unavailable
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize("size", [1, 2, 3, 100])
def test_every_topic_of_the_cluster_is_listed_once_in_name_order(size):
    own = {"a1": 5, "b1": 7, "c1": 1, "z9": 2}       # b1 and z9 are copies led elsewhere
    leaders = {"a1": "a", "b1": "b", "c1": "a", "m5": "c", "q2": "b", "z9": "c"}
    engine = FakeEngine(own, leaders, {"b1": 9, "m5": 3, "q2": 4, "z9": 6})
    seen, unavailable = _walk(engine, size)
    assert seen == [("a1", 5), ("b1", 9), ("c1", 1), ("m5", 3), ("q2", 4), ("z9", 6)]
    assert unavailable == [] and sorted(set(engine.asked)) == ["b1", "m5", "q2", "z9"]


def test_a_prefix_narrows_the_cluster_names_too():
    engine = FakeEngine({"x-1": 1}, {"x-1": "a", "x-2": "b", "y-1": "b"}, {"x-2": 2})
    assert _walk(engine, 10, prefix="x-")[0] == [("x-1", 1), ("x-2", 2)]


def test_a_topic_no_leader_can_describe_is_named_unavailable_or_shown_from_our_copy():
    """Offline (no leader) or its leader not answering: our own copy's numbers when we
    hold one, else the name in `unavailable`; a topic deleted meanwhile is left out."""
    busy = TopicsError("no answer", ErrorCode.NOT_READY)
    gone = TopicsError("gone", ErrorCode.TOPIC_NOT_FOUND)
    leaders = {"held": "b", "offline": None, "busy": "c", "gone": "b", "mine": None}
    engine = FakeEngine({"held": 4, "mine": 8}, leaders,
                        {"held": busy, "busy": busy, "gone": gone})
    seen, unavailable = _walk(engine, 100)
    assert seen == [("held", 4), ("mine", 8)]
    assert sorted(unavailable) == ["busy", "offline"]
    assert "offline" not in engine.asked and "mine" not in engine.asked


def test_a_single_node_lists_its_own_topics_only():
    engine = FakeEngine({"a1": 1}, {}, {}, cluster=False)
    assert _walk(engine, 10) == ([("a1", 1)], [])
