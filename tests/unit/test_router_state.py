"""The router's pure parts: its frames and snapshot form (ledger/router_state.py, the topic
ledger's handlers), the PUT body, and the node-wide graph rules (client/router_admin.py)."""

import pytest

from topics_actors.client import router_admin
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.ledger.router_state import HOPS_MAX, RouterState, parse_definition
from topics_actors.ledger.topic_ledger import TopicLedger, snapshot_entry
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import ListRouters
from topics_actors.storage import frame_body as fb
from topics_actors.storage.frame import decode_at, encode_frame
from topics_actors.storage.frame_types import FrameType
from topics_actors.topic_config import TopicConfig

pytestmark = pytest.mark.timeout(30)


def frame(ftype, tid, body):
    raw = encode_frame(ftype, tid, 0, 1, body)
    return decode_at(raw, 0, len(raw))


def test_cursor_body_round_trip_and_rejects_leftovers():
    body = fb.RouterCursorBody("a->b", 17, 9, 5, 6)
    raw = fb.encode_router_cursor(body)
    assert fb.decode_body(FrameType.ROUTER_CURSOR, raw) == body
    with pytest.raises(ValueError):
        fb.decode_body(FrameType.ROUTER_CURSOR, raw + b"\x00")


def test_ledger_applies_router_frames_and_snapshot_keeps_them():
    ledger = TopicLedger(now_ms=0)
    dest = TopicState("dst", TopicConfig())
    ledger.add_topic(dest)
    router = RouterState("r", "src", "dst", preserve_tag=False, exactly_once=True,
                         filter=(fb.MATCH_GLOB, "k"), cursor=4)
    ledger.apply(frame(FrameType.ROUTER_CREATE, dest.tid,
                       fb.encode_router_create(router.create_body(4))))
    ledger.apply(frame(FrameType.ROUTER_CURSOR, dest.tid, router.cursor_body(10, 6, (3, 4))))
    assert dest.trims == [[3, 4]]
    # A re-PUT keeps the progress and takes the knobs.
    ledger.apply(frame(FrameType.ROUTER_CREATE, dest.tid, fb.encode_router_create(
        RouterState("r", "src", "dst", allow_cycle=True).create_body(0))))
    kept = dest.routers["r"]
    assert (kept.cursor, kept.forwarded_total, kept.allow_cycle, kept.preserve_tag) == (
        10, 6, True, True)
    entry = snapshot_entry(dest, "", [], 0)
    restored = TopicLedger(now_ms=0).restore_entry(entry, "")
    assert restored.routers == dest.routers and restored.trims == [[3, 4]]
    ledger.apply(frame(FrameType.ROUTER_DELETE, dest.tid, fb.encode_router_delete("r")))
    assert dest.routers == {}
    ledger.apply(frame(FrameType.ROUTER_CURSOR, dest.tid, router.cursor_body(11, 7)))
    assert ledger.ignored["router_cursor_without_router"] == 1


def test_passes_hop_cap_and_filter():
    plain = RouterState("r", "a", "b")
    assert plain.passes(None, HOPS_MAX - 1) and not plain.passes(None, HOPS_MAX)
    eq = RouterState("r", "a", "b", filter=(fb.MATCH_EQ, "x"))
    assert eq.passes("x", 0) and not eq.passes("xy", 0) and not eq.passes(None, 0)
    assert eq.filter_json() == ["tag", "Eq", "x"]


@pytest.mark.parametrize("body", [
    {"dest": "b"}, {"source": "a"}, {"source": 1, "dest": "b"},
    {"source": "a", "dest": "b", "preserve_node": "yes"},
    {"source": "a", "dest": "b", "guarantee": "maybe"},
    {"source": "a", "dest": "b", "filter": ["tag", "Glob", "nostar"]},
])
def test_bad_put_bodies_are_invalid_request(body):
    with pytest.raises(TopicsError) as caught:
        parse_definition("r", body)
    assert caught.value.code.wire == "invalid_request"


def routers(*edges):
    return [{"router": f"{s}>{d}", "source": s, "dest": d} for s, d in edges]


def test_graph_rules_in_contract_order():
    graph = routers(("a", "b"), ("b", "c"))
    with pytest.raises(TopicsError) as caught:
        router_admin.check_graph(graph, "c>a", "c", "a", False, 0)
    assert caught.value.detail == {"cycle": ["c", "a", "b", "c"]}
    router_admin.check_graph(graph, "c>a", "c", "a", True, 0)       # allow_cycle
    with pytest.raises(TopicsError) as caught:                         # fan-in before cap
        router_admin.check_graph(graph, "x>c", "x", "c", False, 2)
    assert caught.value.detail["reason"] == "router_dest_fan_in"
    with pytest.raises(TopicsError) as caught:
        router_admin.check_graph(graph, "a>b", "a", "z", False, 0)
    assert caught.value.detail["reason"] == "router_repoint_forbidden"
    with pytest.raises(TopicsError) as caught:
        router_admin.check_graph(graph, "c>d", "c", "d", False, 2)
    assert caught.value.detail == {"limit": "max_routers", "max": 2}
    router_admin.check_graph(graph, "a>b", "a", "b", False, 2)      # an update: no cap
    assert router_admin.route_path(graph, "c", "a") is None


def test_at_the_topic_cap_a_router_may_not_create_its_topics():
    missing = TopicsError("no such topic", ErrorCode.TOPIC_NOT_FOUND)
    steps = router_admin.put_router("r", {"source": "s", "dest": "d"}, 0, topics_max=5)
    assert isinstance(next(steps).msg, ListRouters)
    assert steps.send([{"routers": []}]).topic == "d"           # does the dest exist?
    with pytest.raises(TopicsError) as caught:
        steps.throw(missing)
    assert caught.value.detail == {"limit": "max_topics", "max": 5}
    steps = router_admin.put_router("r", {"source": "s", "dest": "d"}, 0, topics_max=5)
    next(steps)
    steps.send([{"routers": []}])
    assert steps.send({"head_seq": 0}).topic == "s"              # the dest exists
    with pytest.raises(TopicsError) as caught:
        steps.throw(missing)                                     # the source does not
    assert caught.value.detail["limit"] == "max_topics"
