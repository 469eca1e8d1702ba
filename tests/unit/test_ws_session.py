"""The pure rules of a WebSocket on /v0/ws (spec/api.md 7.3), without sockets: client frames
to operations or error frames, the scope and prefix checks per operation, the frames the
server sends, and the subscriptions' cursors (no from_seq_too_old relabel, topics that come
and go, the per-socket cap).
"""

import json

import pytest

from topics_actors.gateway import ws_session as ws
from topics_actors.gateway.api_keys import parse_api_keys
from topics_actors.watch_cursor import PageRead, WatchEvent

KEYS = parse_api_keys("all,ro:r,wo:w,rw:rw:ok-,adm:w+a")


def key(name: str):
    return KEYS.lookup(f"Bearer {name}")


def error_of(text, binary=False) -> ws.OpError:
    with pytest.raises(ws.OpError) as caught:
        ws.parse_op(text, binary)
    return caught.value


# --- client frames in --------------------------------------------------------------------------

def test_ping_and_request_ids():
    assert ws.parse_op('{"op":"ping"}') == ws.Ping(None)
    assert ws.parse_op('{"op":"ping","request_id":{"a":[1]}}') == ws.Ping({"a": [1]})


def test_subscribe_forms_and_defaults():
    one = ws.parse_op('{"op":"subscribe","topic":"t","from_seq":4,"request_id":1}')
    assert one.topics == {"t": (4, False)} and one.lenient is False
    assert one.options == {"node": None, "limit": 1000, "max_batch_bytes": 1048576,
                           "include_meta": True, "include_tags": False, "include_data": True}
    many = ws.parse_op(json.dumps({"op": "subscribe", "lenient": True, "limit": 5,
                                   "node": ["a", "b"], "include_data": False,
                                   "topics": {"b": {"tail": True}, "a": {"from_seq": 2}}}))
    assert list(many.topics.items()) == [("a", (2, False)), ("b", (0, True))]
    assert many.options["limit"] == 5 and many.options["node"] == ["a", "b"]
    assert many.options["include_data"] is False and many.lenient is True
    assert ws.parse_op('{"op":"subscribe","topic":"t","limit":0}').options["limit"] == 1000
    assert ws.parse_op('{"op":"subscribe","topic":"t","limit":5000}').options["limit"] == 1000


@pytest.mark.parametrize("frame", [
    '{"op":"subscribe"}',
    '{"op":"subscribe","topic":"a","topics":{"b":{}}}',
    '{"op":"subscribe","topic":""}',
    '{"op":"subscribe","topic":7}',
    '{"op":"subscribe","topics":{}}',
    '{"op":"subscribe","topics":["a"]}',
    '{"op":"subscribe","topics":{"a":1}}',
    '{"op":"subscribe","topic":"a","from_seq":-1}',
    '{"op":"subscribe","topic":"a","tail":"yes"}',
    '{"op":"subscribe","topic":"a","lenient":1}',
    '{"op":"subscribe","topic":"a","node":"' + "n" * 129 + '"}',
    '{"op":"unsubscribe"}',
    '{"op":"unsubscribe","topics":"a"}',
    '{"op":"unsubscribe","topics":[1]}',
    '{"op":"publish","records":[{"data":1}]}',
    '{"op":"publish","topic":"t","return_seqs":"no"}',
    '{"op":"other"}',
    '{"request_id":1}',
    '[1]',
    '"ping"',
    '{"op":"ping","big":99999999999999999999999}',
])
def test_bad_operations_are_invalid_requests(frame):
    assert error_of(frame).code == "invalid_request"


def test_subscribe_names_at_most_256_topics():
    topics = {f"t{i}": {} for i in range(257)}
    assert error_of(json.dumps({"op": "subscribe", "topics": topics})).code == \
        "invalid_request"


def test_request_id_survives_an_invalid_request_but_not_bad_json():
    assert error_of('{"op":"nope","request_id":"r"}').request_id == "r"
    bad = error_of('{"op":"ping", "request_id":"r"')
    assert (bad.code, bad.request_id) == ("invalid_json", None)
    assert error_of("1e999").code == "invalid_json"
    assert error_of(b"\x00", binary=True).code == "unsupported_message"


def test_a_frame_over_the_body_limit_is_refused_before_parsing():
    frame = '{"op":"ping","pad":"' + "é" * 10 + '"}'       # 42 bytes, 32 characters
    assert ws.parse_op(frame, frame_bytes_max=42) == ws.Ping(None)
    with pytest.raises(ws.OpError) as caught:
        ws.parse_op(frame, frame_bytes_max=41)
    assert (caught.value.code, caught.value.detail) == ("payload_too_large", {"max": 41})
    assert ws.parse_op(frame) == ws.Ping(None)              # 0: no limit


def test_unsubscribe_and_publish():
    assert ws.parse_op('{"op":"unsubscribe","topic":"a"}').topics == ("a",)
    assert ws.parse_op('{"op":"unsubscribe","topics":["b","a","b"]}').topics == ("b", "a")
    publish = ws.parse_op('{"op":"publish","topic":"t","records":[{"data":1}],"x":1}')
    assert (publish.topic, publish.return_seqs) == ("t", True)
    assert publish.body["records"] == [{"data": 1}]


# --- who may do what ---------------------------------------------------------------------------

def _check(frame: str, name: str) -> str | None:
    try:
        ws.authorize(ws.parse_op(frame), key(name))
    except ws.OpError as error:
        return error.code
    return None


def test_scopes_and_prefixes_per_operation():
    sub = '{"op":"subscribe","topics":{"ok-1":{},"no-1":{}}}'
    pub = '{"op":"publish","topic":"ok-1","records":[{"data":1}]}'
    with_config = '{"op":"publish","topic":"ok-1","records":[{"data":1}],"config":{}}'
    assert _check(sub, "all") is None and _check(pub, "all") is None
    assert _check(sub, "ro") is None and _check(pub, "ro") == "forbidden"
    assert _check(sub, "wo") == "forbidden" and _check(pub, "wo") is None
    assert _check(sub, "rw") == "forbidden"            # no-1 is outside its prefix
    assert _check('{"op":"subscribe","topic":"ok-1"}', "rw") is None
    assert _check(pub, "rw") is None
    assert _check(with_config, "rw") == "forbidden" and _check(with_config, "adm") is None
    assert _check('{"op":"ping"}', "wo") is None
    assert _check('{"op":"unsubscribe","topic":"no-1"}', "rw") is None
    ws.authorize(ws.parse_op(with_config), None)        # dev mode: everything
    with pytest.raises(ws.OpError) as caught:
        ws.authorize(ws.parse_op(sub), key("rw"))
    assert caught.value.detail == {"topic": "no-1"}


# --- server frames out -------------------------------------------------------------------------

def test_reply_frames():
    assert json.loads(ws.pong([1])) == {"op": "pong", "request_id": [1]}
    assert json.loads(ws.unsubscribed(None, ["a"])) == {"op": "unsubscribed",
                                                        "request_id": None, "topics": ["a"]}
    ack = json.loads(ws.ack("r", {"topic": "t", "first_seq": 1, "performance": {}}))
    assert ack["op"] == "ack" and ack["seqs"] is None and ack["first_seq"] == 1
    assert json.loads(ws.ack(1, {"seqs": [1]}))["seqs"] == [1]
    error = json.loads(ws.error_frame(2, "forbidden", "no", {"topic": "t"}))
    assert error == {"op": "error", "request_id": 2, "code": "forbidden", "message": "no",
                     "detail": {"topic": "t"}}
    assert json.loads(ws.shutting_down_frame())["code"] == "server_shutting_down"
    deep = [[]]
    for _ in range(300):
        deep = [deep]
    assert json.loads(ws.pong(deep))["request_id"] is None     # cannot be written back


def test_push_frames():
    texts = ws.RecordTexts()
    record = WatchEvent("record", b"", b'{"topic":"t","from_seq":0,"records":[]}')
    assert ws.push(record, texts) == '{"op":"record","topic":"t","from_seq":0,"records":[]}'
    caught = ws.push(WatchEvent("caught-up", b"", {"topic": "t", "head_seq": 3}), texts)
    assert json.loads(caught) == {"op": "caught_up", "topic": "t", "head_seq": 3}
    gone = ws.push(WatchEvent("topic-deleted", b"", {"topic": "t", "head_seq": 0,
                                                     "reason": "deleted"}), texts)
    assert json.loads(gone)["op"] == "topic_deleted"
    assert json.loads(ws.push(WatchEvent("tombstone", b"", {"topic": "t"}), texts))["op"] == \
        "tombstone"


def test_a_shared_page_is_made_a_record_frame_once():
    texts = ws.RecordTexts(pages_max=2)
    pages = [b'{"topic":"t","n":%d}' % n for n in range(3)]
    first = texts.text(pages[0])
    assert texts.text(pages[0]) is first and texts.built == 1      # every socket, one text
    equal_not_same = bytes(bytearray(pages[0]))
    assert texts.text(equal_not_same) == first and texts.built == 2  # keyed by the page
    texts.text(pages[1])
    texts.text(pages[2])                                             # the oldest goes
    assert len(texts.texts) == 2 and json.loads(texts.text(pages[2]))["n"] == 2
    assert texts.built == 4


# --- subscriptions -----------------------------------------------------------------------------

def _states(**from_seqs) -> dict:
    return {name: {"from_seq": seq, "head_seq": 9, "earliest_seq": 1}
            for name, seq in from_seqs.items()}


def test_subscriptions_move_cursors_without_relabel_or_ids():
    subs = ws.Subscriptions()
    options = ws.parse_op('{"op":"subscribe","topic":"a"}').options
    assert subs.subscribe(_states(a=0, b=3), options) == ["a", "b"]
    tomb = {"gap_from": 1, "gap_to": 2, "reason": "cap", "earliest_seq": 3, "head_seq": 5}
    events = subs.cursors.read("a", PageRead(5, 5, True, tomb, b'{"topic":"a"}'))
    assert [e.event for e in events] == ["tombstone", "record", "caught-up"]
    assert events[0].data["reason"] == "cap"             # the first read keeps the reason
    assert all(e.cursor_id == b"" for e in events)
    assert subs.cursors.cursors == {"a": 5, "b": 3}
    assert subs.views["a"].limit == 1000


def test_resubscribe_starts_over_and_unsubscribe_forgets():
    subs = ws.Subscriptions()
    options = ws.parse_op('{"op":"subscribe","topic":"a"}').options
    subs.subscribe(_states(a=0), options)
    subs.cursors.read("a", PageRead(4, 4, True, None, None))
    assert subs.cursors.live == {"a": True}
    narrow = dict(options, limit=1)
    subs.subscribe(_states(a=2), narrow)
    assert subs.cursors.cursors == {"a": 2} and subs.cursors.live == {}
    assert subs.views["a"].limit == 1
    subs.cursors.delete("a")
    assert subs.reading() == []
    assert subs.unsubscribe(("a", "zz")) == ["a"]
    assert subs.topics() == [] and subs.cursors.cursors == {} and not subs.cursors.deleted


def test_a_socket_holds_a_bounded_number_of_topics():
    subs = ws.Subscriptions(topics_max=3)
    options = ws.parse_op('{"op":"subscribe","topic":"a"}').options
    subs.subscribe(_states(a=0, b=0), options)
    subs.check_room(ws.parse_op('{"op":"subscribe","topics":{"a":{},"c":{}}}'))
    with pytest.raises(ws.OpError) as caught:
        subs.check_room(ws.parse_op('{"op":"subscribe","topics":{"c":{},"d":{}}}'))
    assert caught.value.code == "invalid_request" and caught.value.detail == {"max": 3}
