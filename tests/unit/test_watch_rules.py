"""The pure rules of watch sessions (spec/api.md 7.1, 7.2), without sockets: the composite
cursor codec, SSE frame bytes, the POST body, the per-connection stream state (tombstone
relabel, caught-up transitions, terminal deletes), the shard's session store (owner
binding, rewind-only resume, stream leases, idle GC), the commit-feed codec and the routes.
"""

import base64
import dataclasses
import json

import pytest

from tools.testing.manual_clock import ManualClock
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.gateway import sse_frame as sse
from topics_actors.gateway.api_keys import parse_api_keys
from topics_actors.gateway.route_table import SESSION, resolve
from topics_actors.gateway.shared_reads import ReadView
from topics_actors.gateway.watch_request import (
    accepts_event_stream, min_heartbeat_ms, new_wid, owner_of, parse_watch, presented_key,
)
from topics_actors.protocol.commit_feed import (
    Note, NotePage, decode_note, decode_subscription, encode_note, encode_subscription,
    feed_path,
)
from topics_actors.protocol.messages import WatchCreate, WatchCursor, WatchOpen
from topics_actors.shard.watch_sessions import SESSION_TTL_MS, SWEEP_INTERVAL_MS, WatchSessions
from topics_actors.watch_cursor import PageRead as Page
from topics_actors.watch_cursor import WatchCursors, decode_cursor, encode_cursor


# --- cursor codec and frames ------------------------------------------------------------

def test_the_cursor_id_is_unpadded_base64url_of_sorted_json():
    encoded = encode_cursor({"b": 2, "a": 10})
    assert b"=" not in encoded
    raw = base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))
    assert raw == b'{"a":10,"b":2}'
    assert decode_cursor(encoded.decode()) == {"a": 10, "b": 2}


@pytest.mark.parametrize("bad", [None, "", "!!!", "bm90LWpzb24", "WzEsMl0",  # [1,2]
                                 base64.urlsafe_b64encode(b'{"a":-1}').decode(),
                                 base64.urlsafe_b64encode(b'{"a":true}').decode(),
                                 base64.urlsafe_b64encode(b'{"a":"1"}').decode()])
def test_an_unparsable_last_event_id_is_ignored(bad):
    assert decode_cursor(bad) is None


def test_frames_are_event_id_data_and_a_blank_line():
    assert sse.frame(b"record", b"ID", b'{"x":1}') == b'event: record\nid: ID\ndata: {"x":1}\n\n'
    assert sse.frame(b"error", None, b"{}") == b"event: error\ndata: {}\n\n"
    assert sse.heartbeat(1700000000000) == b": hb 1700000000000\n\n"
    assert sse.RETRY == b"retry: 2000\n\n"
    data = sse.record_data("t", 3, 5, 9, b"[1,2]")
    assert json.loads(data) == {"topic": "t", "from_seq": 3, "to_seq": 5, "head_seq": 9,
                                "records": [1, 2]}
    deleted = WatchCursors({"t": 4}).delete("t")
    assert sse.render(deleted) == (b'event: topic-deleted\nid: ' + encode_cursor({"t": 4})
                                   + b'\ndata: {"topic":"t","head_seq":0,"reason":"deleted"}\n\n')
    assert json.loads(sse.shutting_down_data())["code"] == "server_shutting_down"


# --- the POST body ----------------------------------------------------------------------

def test_parse_watch_defaults_clamps_and_name_order():
    plan = parse_watch({"topics": {"b": {"from_seq": 4}, "a": {"tail": True}}}, 1000)
    assert list(plan.topics) == ["a", "b"]
    assert plan.topics == {"a": (0, True), "b": (4, False)}
    assert plan.options == {"node": None, "limit": 256, "max_batch_bytes": 262144,
                            "heartbeat_ms": 15000, "include_meta": True,
                            "include_tags": False, "include_data": True}
    clamped = parse_watch({"topics": {"a": {}}, "limit": 5000, "heartbeat_ms": 1,
                           "node": ["x", "y"]}, 1000)
    assert clamped.options["limit"] == 1000 and clamped.options["heartbeat_ms"] == 1000
    assert parse_watch({"topics": {"a": {}}, "heartbeat_ms": 999_999}, 1000) \
        .options["heartbeat_ms"] == 60000
    assert parse_watch({"topics": {"a": {}}, "heartbeat_ms": 1}, 50) \
        .options["heartbeat_ms"] == 50
    assert min_heartbeat_ms(0) == 1000 and min_heartbeat_ms(20) == 20
    assert min_heartbeat_ms(5000) == 1000


@pytest.mark.parametrize("body", [
    {}, {"topics": []}, {"topics": {}}, {"topics": {f"t{i}": {} for i in range(257)}},
    {"topics": {"a": 1}}, {"topics": {"a": {"from_seq": "1"}}}, {"topics": {"a": {}},
                                                                   "consistency": "x"},
    {"topics": {"a": {}}, "include_data": "no"}, {"topics": {"a": {}}, "node": 5},
    {"topics": {"a": {}}, "node": "n" * 129}, {"topics": {"a": {}}, "node": ["x", "n" * 129]},
])
def test_parse_watch_rejects(body):
    with pytest.raises(TopicsError) as caught:
        parse_watch(body, 1000)
    assert caught.value.code is ErrorCode.INVALID_REQUEST


def test_wids_keys_and_accept():
    wid = new_wid()
    assert wid.startswith("wid_") and len(wid) == 26 and wid != new_wid()
    keys = parse_api_keys("k1,k2")
    k1 = presented_key(keys, "Bearer k1", None)
    assert owner_of(k1) and owner_of(k1) != owner_of(presented_key(keys, None, "k2"))
    assert owner_of(presented_key(keys, None, "k1")) == owner_of(k1)
    assert presented_key(keys, "Bearer nope", "k1") is None      # the header wins
    assert owner_of(None) == "" and presented_key(parse_api_keys(""), "Bearer x", None) is None
    assert all(accepts_event_stream(a) for a in (None, "", "text/event-stream", "*/*",
                                                 "text/html, */*;q=0.1"))
    assert not accepts_event_stream("application/json")


def test_routes():
    route = resolve("GET", "/v0/watch/wid_abc")
    assert (route.handler, route.scope, route.wid) == ("watch_stream", SESSION, "wid_abc")
    assert resolve("POST", "/v0/watch").handler == "watch_create"
    for method, path, code in (("POST", "/v0/watch/w", ErrorCode.METHOD_NOT_ALLOWED),
                               ("GET", "/v0/watch", ErrorCode.METHOD_NOT_ALLOWED),
                               ("GET", "/v0/watch/", ErrorCode.NOT_FOUND),
                               ("GET", "/v0/watch/a/b", ErrorCode.NOT_FOUND)):
        with pytest.raises(TopicsError) as caught:
            resolve(method, path)
        assert caught.value.code is code


# --- one connection's state -------------------------------------------------------------

def _events(events) -> list[tuple[str, dict, dict]]:
    return _events_of(b"".join(sse.render(e) for e in events))


TOMB = {"gap_from": 1, "gap_to": 2, "reason": "cap", "missed_estimate": 2,
        "earliest_seq": 3, "head_seq": 5}


def test_first_read_tombstone_is_from_seq_too_old_then_the_engine_reason():
    state = WatchCursors({"t": 0})
    data = sse.record_data("t", 0, 5, 5, b"[]")
    events = _events(state.read("t", Page(5, 5, True, TOMB, data)))
    assert [e[0] for e in events] == ["tombstone", "record", "caught-up"]
    assert events[0][1]["reason"] == "from_seq_too_old" and events[0][2] == {"t": 2}
    assert events[1][2] == {"t": 5} and events[2][1] == {"topic": "t", "head_seq": 5}
    later = {**TOMB, "gap_from": 6, "gap_to": 7, "reason": "ttl"}
    events = _events(state.read("t", Page(7, 7, True, later, None)))
    assert [(e[0], e[1].get("reason")) for e in events] == [("tombstone", "ttl"),
                                                            ("caught-up", None)]
    assert state.cursors == {"t": 7}


def test_caught_up_once_per_transition_and_silent_passes_advance_the_cursor():
    state = WatchCursors({"t": 0})
    assert [e[0] for e in _events(state.read("t", Page(0, 0, True, None, None)))] \
        == ["caught-up"]                                   # an empty topic
    assert state.read("t", Page(3, 3, True, None, None)) == []    # own records
    assert state.cursors == {"t": 3}
    backlog = state.read("t", Page(5, 9, False, None, sse.record_data(
        "t", 3, 5, 9, b"[]")))
    assert [e[0] for e in _events(backlog)] == ["record"]
    rest = state.read("t", Page(9, 9, True, None, sse.record_data("t", 5, 9, 9, b"[]")))
    assert [e[0] for e in _events(rest)] == ["record", "caught-up"]


def test_deleted_topics_are_terminal_and_finish_the_stream():
    state = WatchCursors({"b": 4, "a": 1})
    assert list(state.cursors) == ["a", "b"]
    event = _events([state.delete("a")])[0]
    assert event[0] == "topic-deleted" and event[2] == {"a": 1, "b": 4}
    assert not state.finished()
    state.delete("b")
    assert state.finished()


def test_read_views_are_hashable_and_equal_for_equal_options():
    options = parse_watch({"topics": {"a": {}}, "node": ["x"]}, 1000).options
    assert ReadView.from_options(options) == ReadView.from_options(dict(options))
    assert hash(ReadView.from_options(options)) == hash(ReadView.from_options(options))


# --- the shard's session store ----------------------------------------------------------


def test_sessions_bind_the_owner_and_only_rewind():
    clock = ManualClock()
    store = WatchSessions(clock)
    store.create(WatchCreate("w1", "owner-a", {"t": 5, "u": 2}, {"limit": 1}))
    with pytest.raises(TopicsError) as caught:
        store.open(WatchOpen("w1", "s1", "owner-b", 1000))
    assert caught.value.code is ErrorCode.UNAUTHORIZED
    with pytest.raises(TopicsError) as caught:
        store.open(WatchOpen("w1", "s1", "", 1000, {"t": 0}))
    assert caught.value.code is ErrorCode.UNAUTHORIZED
    assert store.sessions["w1"].cursors == {"t": 5, "u": 2}      # no rewind without the key
    opened = store.open(WatchOpen("w1", "s1", "owner-a", 1000, {"t": 3, "u": 9, "x": 1}))
    assert opened["cursors"] == {"t": 3, "u": 2} and opened["options"] == {"limit": 1}
    store.cursor(WatchCursor("w1", "s1", {"t": 7, "x": 3}, 1000))
    assert store.sessions["w1"].cursors == {"t": 7, "u": 2}
    with pytest.raises(TopicsError) as caught:
        store.open(WatchOpen("nope", "s", "", 1000))
    assert caught.value.code is ErrorCode.NOT_FOUND
    store.create(WatchCreate("dev", "", {"t": 0}, {}))
    assert store.open(WatchOpen("dev", "s2", "anyone", 1000))["owner"] == ""


def test_idle_sessions_are_collected_but_never_with_an_open_stream():
    clock = ManualClock()
    store = WatchSessions(clock)
    store.create(WatchCreate("idle", "", {"t": 0}, {}))
    store.create(WatchCreate("busy", "o", {"t": 0}, {}))
    store.open(WatchOpen("busy", "s", "o", 2 * SESSION_TTL_MS))
    assert store.census() == {"watch_sessions": 2, "sse_streams": 1,
                              "sse_streams_by_owner": {"o": 1}}
    clock.now += SESSION_TTL_MS + 1
    assert store.census()["watch_sessions"] == 1 and "busy" in store.sessions
    store.cursor(WatchCursor("busy", "s", {}, 0, closed=True))
    assert store.census()["sse_streams"] == 0
    clock.now += SESSION_TTL_MS
    assert store.census()["watch_sessions"] == 1                 # touched by the close
    clock.now += 1
    assert store.census()["watch_sessions"] == 1                 # swept a moment ago
    clock.now += SWEEP_INTERVAL_MS
    assert store.census()["watch_sessions"] == 0


def test_the_census_follows_streams_as_they_open_close_and_run_out():
    """Kept as streams change, it must always equal a count over the sessions (owners'
    counts included) after a sweep."""
    clock = ManualClock()
    store = WatchSessions(clock)

    def counted() -> dict:
        by_owner = {}
        for session in store.sessions.values():
            if session.owner and session.streams:
                by_owner[session.owner] = by_owner.get(session.owner, 0) + len(session.streams)
        return {"watch_sessions": len(store.sessions),
                "sse_streams": sum(len(s.streams) for s in store.sessions.values()),
                "sse_streams_by_owner": by_owner}
    for i in range(6):
        store.create(WatchCreate(f"w{i}", "ab"[i % 2] if i < 4 else "", {"t": 0}, {}))
        store.open(WatchOpen(f"w{i}", f"s{i}", "ab"[i % 2] if i < 4 else "", 1000 * (i + 1)))
    store.open(WatchOpen("w0", "s0", "a", 1000))                  # the same stream again
    store.open(WatchOpen("w0", "s0b", "a", 5000))
    store.cursor(WatchCursor("w1", "s1", {}, 0, closed=True))
    store.cursor(WatchCursor("w1", "s1", {}, 0, closed=True))    # closed twice
    for _ in range(8):
        assert store.census() == counted()
        clock.now += SWEEP_INTERVAL_MS                            # leases run out in turn


def test_a_stream_whose_lease_runs_out_no_longer_counts():
    clock = ManualClock()
    store = WatchSessions(clock)
    store.create(WatchCreate("w", "o", {"t": 0}, {}))
    store.open(WatchOpen("w", "s", "o", 1000))
    clock.now += 999
    assert store.census()["sse_streams"] == 1
    store.cursor(WatchCursor("w", "s", {"t": 1}, 1000))          # renewed
    clock.now += 1001
    assert store.census()["sse_streams"] == 0


# --- the commit feed --------------------------------------------------------------------

def test_commit_notes_and_subscriptions_round_trip_and_refuse_garbage():
    assert decode_note(encode_note("a.b", 7)) == Note("a.b", 7)
    assert decode_note(encode_note("gone", None)) == Note("gone", None)
    page = NotePage(3, 5, 1, False, 12, [[4, 10, b'{"d":1}', "t", None, False],
                                          [5, 11, b'{"d":2}', None, "n", False]])
    assert decode_note(encode_note("p", 5, page)) == Note("p", 5, page)
    for bad in (b"x", b"\x01", b"\xc1", b"\x93\x01\x01\xc0", b"\x93\xa1x\xc3\xc0",
                b"\x93\xa1x\x01\x93\x01\x02\x03"):
        assert decode_note(bad) is None
    assert decode_subscription(encode_subscription(True, ["a.b", "c"])) == (True, ["a.b", "c"])
    assert decode_subscription(encode_subscription(False, [])) == (False, [])
    for bad in (b"\x01", b"\x92\x01\x90", b"\x92\xc3\x91\x01", b"\xc1"):
        assert decode_subscription(bad) is None
    assert feed_path("ipc:///run/shard-03.sock") == "/run/shard-03.feed"
    assert feed_path("") == "" and feed_path("tcp://127.0.0.1:1") == ""


# --- shared reads -----------------------------------------------------------------------

class FakeEngine:
    def __init__(self):
        self.calls = []
        self.head = 2
        self.release = None

    async def call(self, topic, msg, wait_ms=0):
        self.calls.append((topic, msg.from_seq))
        if self.release is not None:
            await self.release.wait()
        records = [[s, 1, b'{"d":%d}' % s, None, None, False]
                   for s in range(msg.from_seq + 1, self.head + 1)]
        return {"records": records, "next_from_seq": self.head, "head_seq": self.head,
                "caught_up": True, "tombstone": None}


def test_watchers_at_one_cursor_share_one_read_and_the_same_bytes():
    import asyncio
    from topics_actors.gateway.shared_reads import SharedReads

    async def run():
        engine = FakeEngine()
        engine.release = asyncio.Event()
        reads = SharedReads(engine)
        view = ReadView.from_options(parse_watch({"topics": {"t": {}}}, 1000).options)
        pending = [asyncio.ensure_future(reads.page("t", 0, view)) for _ in range(5)]
        await asyncio.sleep(0)
        engine.release.set()
        pages = await asyncio.gather(*pending)
        assert engine.calls == [("t", 0)]
        assert all(p.records is pages[0].records for p in pages)       # one rendering, shared
        assert json.loads(pages[0].records)["records"][1] == {"$seq": 2, "$ts": 1, "data": 2}
        assert (await reads.page("t", 0, view)).records is pages[0].records   # until a commit
        engine.head = 3
        reads.invalidate("t")
        fresh = await reads.page("t", 0, view)
        assert engine.calls == [("t", 0), ("t", 0)] and fresh.head_seq == 3
        other = ReadView.from_options(parse_watch({"topics": {"t": {}},
                                                   "include_data": False}, 1000).options)
        await reads.page("t", 0, other)                          # other options: own read
        assert len(engine.calls) == 3
    asyncio.run(run())


class SilentListener:
    """A commit feed that lost every notification."""
    def watch(self, topic, wake, taker=None):
        self.watched = topic
        self.taker = taker

    def unwatch(self, topic, wake):
        self.watched = None


def test_a_lost_notification_is_caught_up_at_the_heartbeat_and_reports_flow():
    import asyncio
    from topics_actors.gateway.shared_reads import SharedReads
    from topics_actors.gateway.watch_stream import WatchStream

    async def run():
        engine, listener, reports = FakeEngine(), SilentListener(), []
        view = ReadView.from_options(parse_watch({"topics": {"t": {}}}, 1000).options)
        stream = WatchStream(WatchCursors({"t": 0}), view, 50, SharedReads(engine), listener,
                             lambda cursors, closed: reports.append((cursors, closed)),
                             lambda: False)
        chunks = stream.chunks()
        assert await chunks.__anext__() == sse.RETRY
        first = _events_of(await chunks.__anext__())
        assert [e[0] for e in first] == ["record", "caught-up"] and listener.watched == "t"
        engine.head = 3                       # committed, but no notification arrives
        beat = await asyncio.wait_for(chunks.__anext__(), 5)
        assert beat.startswith(b": hb ")
        while beat.startswith(b": hb "):     # read again once the shared page is 1 s old
            beat = await asyncio.wait_for(chunks.__anext__(), 5)
        late = _events_of(beat)
        assert late[0][0] == "record" and late[0][1]["from_seq"] == 2
        assert late[0][2] == {"t": 3}
        await chunks.aclose()
        assert listener.watched is None
        assert reports[0] == ({"t": 2}, False) and reports[-1] == ({"t": 3}, True)
    asyncio.run(run())


def _events_of(raw: bytes) -> list:
    out = []
    for block in raw.decode().split("\n\n")[:-1]:
        fields = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((fields["event"], json.loads(fields["data"]),
                    decode_cursor(fields["id"])))
    return out


class Sink:
    def __init__(self):
        self.chunks, self.open = [], True

    def ready(self):
        return self.open

    def push(self, chunk):
        self.chunks.append(chunk)


def test_a_waiting_stream_takes_a_commit_page_without_waking():
    """The fan-out path: a stream parked at exactly a notification page's start writes the
    page's frames to its connection itself and stays asleep; anything else wakes it."""
    import asyncio
    from topics_actors.gateway.shared_reads import SharedReads
    from topics_actors.gateway.watch_stream import WatchStream
    from topics_actors.protocol.commit_feed import NotePage

    async def run():
        engine, listener, reports, sink = FakeEngine(), SilentListener(), [], Sink()
        view = ReadView.from_options(parse_watch({"topics": {"t": {}}}, 60_000).options)
        reads = SharedReads(engine)
        stream = WatchStream(WatchCursors({"t": 0}), view, 60_000, reads, listener,
                             lambda cursors, closed: reports.append((cursors, closed)),
                             lambda: False)
        stream.attach(sink)
        chunks = stream.chunks()
        await chunks.__anext__()                        # retry:
        await chunks.__anext__()                        # the backlog, up to seq 2
        parked = asyncio.ensure_future(chunks.__anext__())
        await asyncio.sleep(0)
        assert stream.waiting and listener.taker == stream.take
        page = NotePage(2, 3, 1, False, 7, [[3, 9, b'{"d":3}', None, None, False]])
        assert not stream.take("t", NotePage(1, 3, 1, False, 7, page.records))  # elsewhere
        reads.offer("t", page)
        assert stream.take("t", page)
        events = _events_of(sink.chunks[0])
        assert [e[0] for e in events] == ["record", "caught-up"]
        assert events[0][1]["records"] == [{"$seq": 3, "$ts": 9, "data": 3}]
        assert events[0][2] == {"t": 3} and reports[-1] == ({"t": 3}, False)
        assert not parked.done() and not stream.wake.is_set()      # still asleep
        mine = NotePage(3, 4, 1, True, 7, [[4, 9, b'{"d":4}', None, "me", False]])
        stream.view = dataclasses.replace(view, node="me")   # its own record: filtered
        reads.offer("t", mine)
        assert stream.take("t", mine) and len(sink.chunks) == 1    # moved, wrote nothing
        assert stream.state.cursors == {"t": 4}
        sink.open = False                               # a backed-up connection: wake
        assert not stream.take("t", NotePage(4, 5, 1, False, 7, page.records))
        parked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await parked                                # the generator closes with it
        assert reports[-1] == ({"t": 4}, True)
    asyncio.run(run())


@pytest.mark.parametrize("live", [None, False, True])
@pytest.mark.parametrize("records,caught_up", [(b"[1]", True), (b"[1]", False), (None, True),
                                               (None, False)])
def test_advance_moves_the_state_exactly_as_read_does(live, records, caught_up):
    """A stream handed already-rendered frames (watch_stream's shared frames) advances its
    cursor state without making events: the state must end as read() leaves it."""
    def state() -> WatchCursors:
        cursors = WatchCursors({"a": 3, "b": 7})
        if live is not None:
            cursors.live["a"] = live
        return cursors
    page = Page(9, 9 if caught_up else 12, caught_up, None, records)
    read, advanced = state(), state()
    read.read("a", page)
    advanced.advance("a", page)
    assert (advanced.cursors, advanced.live, advanced.first_read) == \
        (read.cursors, read.live, read.first_read)
