"""The WebSocket connection's tasks (gateway/ws_connection.py) without sockets: a fake
channel, fake shared reads over in-memory topics, a fake commit listener. Goals: replies
keep the order of the client's frames; `subscribed` precedes the topic's first record and
no record of a topic follows its `unsubscribed`, even when a read was in flight; a commit
wakes the pusher; a deleted topic leaves the socket; stop() sends server_shutting_down and
ends the socket; the client leaving ends every task.
"""

import asyncio
import json

import pytest

from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError
from topics_actors.gateway.sse_frame import record_data
from topics_actors.gateway.ws_connection import WsConnection
from topics_actors.gateway.ws_session import RecordTexts
from topics_actors.watch_cursor import PageRead

pytestmark = pytest.mark.timeout(30)
WAIT_S = 5


class FakeChannel:
    def __init__(self):
        self.incoming: asyncio.Queue = asyncio.Queue()
        self.sent: asyncio.Queue = asyncio.Queue()

    async def receive(self):
        return await self.incoming.get()

    async def send(self, text: str) -> None:
        await self.sent.put(json.loads(text))

    def ready(self) -> bool:
        return True

    def push(self, *texts: str) -> None:
        for text in texts:
            self.sent.put_nowait(json.loads(text))

    def close(self) -> None:
        pass

    def op(self, **op) -> None:
        self.incoming.put_nowait((json.dumps(op), False))

    async def next(self) -> dict:
        return await asyncio.wait_for(self.sent.get(), WAIT_S)


class FakeReads:
    """Topics in memory; a read of a topic in `held` waits until it is released."""

    def __init__(self, topics: dict):
        self.topics = topics
        self.held: dict[str, asyncio.Event] = {}
        self.reading: dict[str, asyncio.Event] = {}

    async def page(self, topic, from_seq, view) -> PageRead:
        if topic in self.held:
            self.reading.setdefault(topic, asyncio.Event()).set()
            await self.held[topic].wait()
        if topic not in self.topics:
            raise TopicsError("gone", ErrorCode.TOPIC_NOT_FOUND)
        log = self.topics[topic]
        head = len(log)
        records = None
        if from_seq < head:
            rows = b",".join(b'{"$seq":%d,"data":%s}' % (s, json.dumps(log[s - 1]).encode())
                             for s in range(from_seq + 1, head + 1))
            records = record_data(topic, from_seq, head, head, b"[" + rows + b"]")
        return PageRead(head, head, True, None, records)

    def refresh(self, topic, max_age_s) -> None:
        pass

    def offered(self, topic, from_seq, view) -> PageRead | None:
        """The page of a commit notification: what page() reads, without waiting."""
        log = self.topics.get(topic, [])
        if topic in self.held or from_seq >= len(log):
            return None
        rows = b",".join(b'{"$seq":%d,"data":%s}' % (s, json.dumps(log[s - 1]).encode())
                         for s in range(from_seq + 1, len(log) + 1))
        return PageRead(len(log), len(log), True, None,
                        record_data(topic, from_seq, len(log), len(log), b"[" + rows + b"]"))


class FakeListener:
    def __init__(self):
        self.waiters: dict[str, set] = {}

    def watch(self, topic, wake, taker=None) -> None:
        self.waiters.setdefault(topic, set()).add(wake)

    def unwatch(self, topic, wake) -> None:
        self.waiters.get(topic, set()).discard(wake)

    def wake(self, topic) -> None:
        for event in self.waiters.get(topic, ()):
            event.set()


class FakeHooks:
    heartbeat_s = 60.0
    frame_bytes_max = 0
    records = RecordTexts()

    def __init__(self, topics: dict):
        self.reads = FakeReads(topics)
        self.listener = FakeListener()
        self.stop = False

    def stopping(self) -> bool:
        return self.stop

    async def topic_states(self, topics, lenient) -> dict:
        return {name: {"from_seq": seq, "head_seq": len(self.reads.topics[name]),
                       "earliest_seq": 1} for name, (seq, _tail) in topics.items()}

    async def publish(self, op, key) -> dict:
        self.reads.topics.setdefault(op.topic, []).extend(
            r["data"] for r in op.body["records"])
        return {"topic": op.topic, "head_seq": len(self.reads.topics[op.topic])}


def _start(topics: dict):
    hooks, channel = FakeHooks(topics), FakeChannel()
    connection = WsConnection(hooks, None, lambda: None)
    task = asyncio.ensure_future(connection.run(channel))
    return hooks, channel, connection, task


async def _subscribed_to_a():
    """A socket subscribed to topic `a` (one record), past its first three frames."""
    hooks, channel, connection, task = _start({"a": [1]})
    channel.op(op="subscribe", topic="a")
    assert [(await channel.next())["op"] for _ in range(3)] == ["subscribed", "record",
                                                                "caught_up"]
    return hooks, channel, connection, task


async def _leave(channel: FakeChannel, task: asyncio.Future) -> None:
    """The client goes away: every task of the socket ends."""
    channel.incoming.put_nowait((None, False))
    await asyncio.wait_for(task, WAIT_S)


def test_replies_in_order_and_subscribed_before_records():
    async def scenario():
        hooks, channel, _connection, task = _start({"a": [1, 2]})
        channel.op(op="ping", request_id=1)
        channel.op(op="subscribe", request_id=2, topic="a")
        channel.op(op="ping", request_id=3)
        first = [await channel.next() for _ in range(2)]
        assert first == [{"op": "pong", "request_id": 1},
                         {"op": "subscribed", "request_id": 2,
                          "topics": {"a": {"from_seq": 0, "head_seq": 2, "earliest_seq": 1}}}]
        rest = [await channel.next() for _ in range(3)]
        assert sorted(f["op"] for f in rest) == ["caught_up", "pong", "record"]
        record = next(f for f in rest if f["op"] == "record")
        assert [r["data"] for r in record["records"]] == [1, 2]
        channel.op(op="publish", request_id=4, topic="a", records=[{"data": 3}])
        assert (await channel.next())["op"] == "ack"
        hooks.listener.wake("a")                       # the commit feed's note
        assert [r["data"] for r in (await channel.next())["records"]] == [3]
        assert (await channel.next())["op"] == "caught_up"
        await _leave(channel, task)
        assert hooks.listener.waiters == {"a": set()}  # unwatched
    asyncio.run(scenario())


def test_no_record_follows_unsubscribed_even_with_a_read_in_flight():
    async def scenario():
        hooks, channel, connection, task = _start({"a": [1], "b": [1]})
        channel.op(op="subscribe", topics={"a": {}, "b": {}})
        assert len([await channel.next() for _ in range(5)]) == 5
        hooks.reads.topics["a"].append(2)
        hooks.reads.held["a"] = asyncio.Event()
        hooks.listener.wake("a")
        await asyncio.wait_for(hooks.reads.reading.setdefault("a", asyncio.Event()).wait(),
                               WAIT_S)                  # the pusher waits for a's page
        channel.op(op="unsubscribe", request_id="u", topic="a")
        while not connection.changes:                   # the reader queued the change
            await asyncio.sleep(0)
        hooks.reads.held["a"].set()                     # the page arrives after the op
        frames = [await channel.next() for _ in range(3)]
        ops = [f["op"] for f in frames]
        assert ops.index("unsubscribed") == 2           # the page in flight went out first
        assert frames[2]["topics"] == ["a"]
        hooks.reads.topics["a"].append(3)
        hooks.reads.topics["b"].append(2)
        hooks.listener.wake("a")
        hooks.listener.wake("b")
        late = [await channel.next() for _ in range(2)]
        assert [f["topic"] for f in late] == ["b", "b"]
        await _leave(channel, task)
    asyncio.run(scenario())


def test_a_deleted_topic_leaves_the_socket():
    async def scenario():
        hooks, channel, connection, task = await _subscribed_to_a()
        del hooks.reads.topics["a"]
        hooks.listener.wake("a")
        assert await channel.next() == {"op": "topic_deleted", "topic": "a", "head_seq": 0,
                                        "reason": "deleted"}
        channel.op(op="ping")
        assert (await channel.next())["op"] == "pong"
        assert connection.subs.topics() == [] and hooks.listener.waiters["a"] == set()
        await _leave(channel, task)
    asyncio.run(scenario())


def test_stop_sends_shutting_down_then_ends():
    async def scenario():
        hooks, channel, connection, task = await _subscribed_to_a()
        hooks.stop = True
        connection.wake.set()                           # what WatchService.stop() does
        assert (await channel.next())["code"] == "server_shutting_down"
        await asyncio.wait_for(task, WAIT_S)
        assert channel.sent.empty()
    asyncio.run(scenario())


def test_a_bug_in_an_op_ends_the_socket_for_the_top_level_and_other_errors_are_frames():
    """An InvariantViolation (or a failed assert) is no `internal` frame: it leaves run()
    for the process's top level (http_server), which ends the process; any other
    exception of an op answers that op `internal` and the socket goes on."""
    class Broken(FakeHooks):
        async def publish(self, op, key) -> dict:
            raise self.error

    async def scenario(error: BaseException):
        hooks, channel = Broken({}), FakeChannel()
        hooks.error = error
        task = asyncio.ensure_future(WsConnection(hooks, None, lambda: None).run(channel))
        channel.op(op="publish", request_id=7, topic="t", records=[{"data": 1}])
        if isinstance(error, AssertionError):
            with pytest.raises(InvariantViolation, match="seq went backwards"):
                await asyncio.wait_for(task, WAIT_S)
            return
        frame = await channel.next()
        assert (frame["op"], frame["code"], frame["request_id"]) == ("error", "internal", 7)
        await _leave(channel, task)
    asyncio.run(scenario(InvariantViolation("seq went backwards")))
    asyncio.run(scenario(RuntimeError("boom")))


def test_a_waiting_socket_takes_a_commit_page_without_its_pusher():
    """While the pusher waits and nothing is queued, a notification's page at the socket's
    cursor goes out at once (the writer is not involved); elsewhere it is refused, so the
    listener wakes the pusher instead."""
    from topics_actors.protocol.commit_feed import NotePage

    async def scenario():
        hooks, channel, connection, task = await _subscribed_to_a()
        while not connection.waiting:
            await asyncio.sleep(0)
        hooks.reads.topics["a"].append(2)
        assert not connection.take("a", NotePage(0, 2, 1, False, 1, []))   # elsewhere
        assert connection.take("a", NotePage(1, 2, 1, False, 1, []))
        assert channel.sent.qsize() >= 1
        frame = channel.sent.get_nowait()
        assert frame["op"] == "record" and frame["records"] == [{"$seq": 2, "data": 2}]
        assert not connection.wake.is_set()          # the pusher slept through it
        assert connection.subs.cursors.cursors["a"] == 2
        await _leave(channel, task)
    asyncio.run(scenario())
