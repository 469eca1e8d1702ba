"""A diff that names routers to settle (protocol/messages.py Diff.settle, the gateway's
read-your-writes on a routed destination in one round trip): answered at once when every
router named has copied that far (or is gone, or feeds another topic), parked while one is
behind, and answered {settled: false} when woken still behind or when the wait runs out,
when the gateway waits with router_sync for what is left of the same deadline. The
gateway's first read goes out beside its plan and is kept when the routers' cursors it
reports had reached the plan's heads. The
harness's single shard has no router feed: a router it holds never copies, so its cursor
stays where it was made."""

import asyncio
import time

import pytest

from tests.unit.test_shard_core import rec
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.router_api import RoutedReads
from topics_actors.gateway.topic_api import TopicApi
from topics_actors.protocol.envelope import decode_reply
from topics_actors.protocol.messages import Append, Diff, PutRouter
from topics_actors.shard import diff_read
from topics_actors.shard.routers.router_book import RouterPass

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def routed(shard):
    shard.put("src")
    shard.append("dst", rec(b'{"x":1}'))
    shard.call(PutRouter("dst", "r", "src"))
    shard.append("src", rec(b'{"s":1}'), rec(b'{"s":2}'))    # never copied here
    return shard


def test_a_diff_is_answered_at_once_when_its_routers_are_settled(routed):
    assert routed.core.routers.settled("dst", [["r", 0]])
    assert not routed.core.routers.settled("dst", [["r", 1]])
    assert routed.core.routers.settled("other", [["r", 5]])      # r feeds another topic
    assert routed.core.routers.settled("dst", [["gone", 5]])
    for settle in ([["r", 0]], [["gone", 9]], []):
        reply = routed.call(Diff("dst", 0, settle=settle))
        assert [r[0] for r in reply["records"]] == [1] and reply["caught_up"]


def test_a_diff_waits_for_a_router_behind_then_says_unsettled(routed, monkeypatch):
    monkeypatch.setattr(diff_read, "DIFF_SETTLE_WAIT_MS", 20)
    assert routed.turn(Diff("dst", 0, settle=[["r", 2]])) == {}      # parked
    assert routed.core.polls.count == 1
    deadline = time.monotonic() + 10
    replies = []
    while not replies and time.monotonic() < deadline:
        replies = routed.core.expire_polls()
    assert len(replies) == 1
    corr, body = decode_reply(replies[0][1])
    assert corr == 1 and body["settled"] is False and "records" not in body


def test_a_write_that_wakes_a_waiting_diff_early_leaves_it_unsettled(routed):
    """Another write to the destination wakes the parked read while its router is still
    behind: it answers unsettled (the gateway waits on with router_sync), never a page
    without the copy it waits for."""
    assert routed.turn(Diff("dst", 0, settle=[["r", 2]])) == {}
    out = routed.turn(Append("dst", [list(rec(b'{"y":1}'))]), first=2)
    assert out[1] == {"topic": "dst", "settled": False} and out[2]["first_seq"] == 2


@pytest.mark.parametrize("bad", [
    dict(settle=[["r", 1]], wait_ms=5), dict(settle=[["r"]]), dict(settle=[["r", -1]]),
    dict(settle=[[1, 1]]), dict(settle=[["r", 1]] * 65), dict(settle=["r"]),
])
def test_a_malformed_settle_is_refused(routed, bad):
    with pytest.raises(TopicsError) as caught:
        routed.call(Diff("dst", 0, **bad))
    assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_a_diff_in_the_batch_of_the_copy_it_waits_for_sees_the_copy(routed):
    """The router's cursor moves when its pass is staged, its copies show at the commit: a
    settled diff answered in that same commit, ahead of the pass, must not read before
    the copies (it parks, and the copy's wake answers it)."""
    page = routed.call(Diff("src", 0, include_tags=True, include_hops=True))
    out = routed.turn(Diff("dst", 0, settle=[["r", 2]]), RouterPass("r", 0, page))
    assert [r[0] for r in out[1]["records"]] == [1, 2, 3]
    assert routed.core.routers.visible_cursor == {}


def test_a_settled_diff_reply_gives_the_routers_cursors_at_the_read(routed):
    """What the gateway's read beside its plan checks: each router's cursor as readers see
    it (a pass staged in the same batch, not yet committed, is not counted), None for a
    router gone or feeding another topic."""
    reply = routed.call(Diff("dst", 0, settle=[["r", 0], ["gone", 0]]))
    assert reply["router_cursors"] == [["r", 0, 2], ["gone", None, None]]  # src's head 2
    page = routed.call(Diff("src", 0, include_tags=True, include_hops=True))
    out = routed.turn(Diff("dst", 0, settle=[["r", 0]]), RouterPass("r", 0, page))
    assert out[1]["router_cursors"] == [["r", 0, 2]] and len(out[1]["records"]) == 1
    assert routed.call(Diff("dst", 0, settle=[["r", 0]]))["router_cursors"] == [["r", 2, 2]]
    routed.core.routers.sources_owned = False        # a cluster node's copy: no head
    assert routed.call(Diff("dst", 0, settle=[["r", 0]]))["router_cursors"] == [["r", 2, None]]
    assert "router_cursors" not in routed.call(Diff("dst", 0))


class Engine:
    """The gateway's engine link: what it was asked, and a destination whose router is at
    `cursor` (a settled diff past it answers unsettled); `source_head`: the head of the
    router's source when the destination's shard holds it."""

    def __init__(self, cursor: int = 0, source_head: int | None = None):
        self.asked = []
        self.cursor, self.source_head = cursor, source_head

    async def call(self, topic, msg, wait_ms=0):
        self.asked.append(msg)
        if isinstance(msg, Diff) and msg.settle and msg.settle[0][1] > self.cursor:
            return {"topic": topic, "settled": False}
        reply = {"topic": topic, "records": [], "next_from_seq": msg.from_seq}
        if isinstance(msg, Diff) and msg.settle:
            reply["router_cursors"] = [["r", self.cursor, self.source_head]]
        return reply


class Routed(RoutedReads):
    """RoutedReads with one router into "dst", whose source's head is 7."""

    def __init__(self):
        super().__init__(None)
        self.synced, self.planned = [], 0

    async def routers_into(self, dest):
        return [("r", "src")]

    async def plan(self, dest, routers=None):
        self.planned += 1
        return [["r", 7]]

    async def settle(self, dest, plan=None, deadline_s=None):
        self.synced.append(plan)
        assert deadline_s is not None and deadline_s - time.monotonic() <= 2.0


@pytest.mark.parametrize("wait_ms", [0, 100])
def test_the_gateway_waits_for_routers_within_one_deadline_then_reads(wait_ms):
    """A read that does not long-poll carries the wait to the shard; back unsettled (woken
    by another write, or out of time), router_sync waits for what is left of the same
    deadline, then the read. A long poll cannot carry it: router_sync first."""
    engine, routed = Engine(), Routed()
    api = TopicApi(GatewaySettings(), engine, routed)
    reply = asyncio.run(api._settled_diff(Diff("dst", 3, wait_ms=wait_ms)))
    assert reply["next_from_seq"] == 3 and routed.synced == [[["r", 7]]]
    settles = [m.settle for m in engine.asked]
    assert settles == ([None] if wait_ms else [[["r", 0]], [["r", 7]], None])


@pytest.mark.parametrize("cursor", [7, 9])
def test_a_read_whose_routers_had_copied_the_plans_heads_is_kept(cursor):
    """The read that went out beside the plan is the answer when each router's cursor at
    the read had reached its source's head in the plan: one read, no settle wait."""
    engine, routed = Engine(cursor), Routed()
    api = TopicApi(GatewaySettings(), engine, routed)
    reply = asyncio.run(api._settled_diff(Diff("dst", 3)))
    assert reply["router_cursors"] == [["r", cursor, None]] and routed.synced == []
    assert [m.settle for m in engine.asked] == [[["r", 0]]]


@pytest.mark.parametrize("cursor", [8, 7])
def test_a_router_reading_its_own_shard_needs_no_plan_after_the_first_read(cursor):
    """The destination's shard gives the head of a source it holds: from the next read
    on, the gateway asks no head of that source, and the reply's head decides (8 here:
    a write since the plan); a read behind it is read again, settled at that head."""
    engine, routed = Engine(cursor, source_head=8), Routed()
    api = TopicApi(GatewaySettings(), engine, routed)
    asyncio.run(api._settled_diff(Diff("dst", 3)))
    assert routed.planned == 1 and routed.local == {"r"}
    engine.asked.clear()
    reply = asyncio.run(api._settled_diff(Diff("dst", 3)))
    assert routed.planned == 1
    settles = [m.settle for m in engine.asked]
    if cursor == 8:
        assert settles == [[["r", 0]]] and reply["router_cursors"] == [["r", 8, 8]]
    else:
        assert settles[:2] == [[["r", 0]], [["r", 8]]]
    engine.source_head = None                # the source is no longer in that shard
    asyncio.run(api._settled_diff(Diff("dst", 3)))
    assert routed.local == set()


def test_a_read_behind_the_plan_is_read_again_settled():
    engine, routed = Engine(6), Routed()
    api = TopicApi(GatewaySettings(), engine, routed)
    asyncio.run(api._settled_diff(Diff("dst", 3)))
    assert [m.settle for m in engine.asked][:2] == [[["r", 0]], [["r", 7]]]
