"""Commit notifications that carry their page (protocol/commit_feed.py): the shard's
publisher notifies only topics a gateway subscribes to, and the page is the diff a
watcher at the previous notification's head would read; the gateway's SharedReads serves
such a watcher from it, and only when the watcher's read options would read exactly it.

Method: a shard harness (no sockets) whose commits feed a real CommitPublisher on its feed
socket, a connection to it in the test, and SharedReads over an engine that counts diffs.
"""

import asyncio
import socket

import pytest
import zmq

from tests.unit.test_shard_core import rec
from topics_actors.gateway.shared_reads import ReadView, SharedReads
from topics_actors.protocol.commit_feed import (
    NotePage, decode_note, encode_subscription, feed_path,
)
from topics_actors.protocol.lane import FrameReader, frame
from topics_actors.protocol.messages import Diff
from topics_actors.shard import diff_read
from topics_actors.shard.commit_publisher import CommitPublisher

pytestmark = pytest.mark.timeout(30)


class Subscriber:
    """A gateway's feed connection, blocking: the publisher's loop runs in the test."""

    def __init__(self, publisher: CommitPublisher, poller: zmq.Poller, path: str):
        self.publisher, self.poller = publisher, poller
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.settimeout(5)
        self.reader, self.notes = FrameReader(), []
        self.turn()                                   # the publisher accepts it

    def turn(self) -> None:
        self.publisher.ready(self.poller.poll(1000))

    def change(self, subscribed: bool, *topics: str) -> None:
        self.sock.sendall(frame(encode_subscription(subscribed, list(topics))))
        self.turn()

    def note(self):
        while not self.notes:
            self.notes += [decode_note(raw) for raw in self.reader.feed(self.sock.recv(65536))]
        return self.notes.pop(0)

    def quiet(self) -> bool:
        self.sock.settimeout(0.1)
        try:
            return not self.sock.recv(65536, socket.MSG_PEEK)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(5)


@pytest.fixture
def feed(tmp_path):
    poller = zmq.Poller()
    ipc = f"ipc://{tmp_path}/shard-00.sock"
    publisher = CommitPublisher(poller, ipc)
    sub = Subscriber(publisher, poller, feed_path(ipc))
    yield publisher, sub
    sub.sock.close()
    publisher.close()


def publish(publisher, shard, *names):
    def read_page(topic, msg):
        return diff_read.diff(topic, shard.core.reader.read, msg, shard.core.stager.clock())
    publisher.publish(set(names), shard.core.registry, read_page)


def test_only_watched_topics_get_pages_and_a_page_is_the_diff_from_the_last_head(shard, feed):
    publisher, sub = feed
    shard.append("t", rec(b'{"x":1}', tag="a"))
    sub.change(True, "u")                   # another topic
    publish(publisher, shard, "t")
    assert sub.quiet() and publisher.published == 0     # nobody watches t: no note
    sub.change(True, "t")
    assert "t" in publisher.watched
    publish(publisher, shard, "t")          # the first since subscribing: no page yet
    first = sub.note()
    assert first.topic == "t" and first.head == 1 and first.page is None
    shard.append("t", rec(b'{"x":2}', tag="b"), rec(b'{"x":3}', node="n"))
    publish(publisher, shard, "t")
    page = sub.note().page
    expected = shard.call(Diff("t", 1, 0, None, True, True, 0, 0))
    assert (page.from_seq, page.head_seq) == (1, 3)
    assert page.records == expected["records"]
    assert page.bytes == len(b'{"x":2}') + len(b'{"x":3}')
    sub.change(False, "t")
    assert "t" not in publisher.watched and "u" in publisher.watched


def test_a_closed_feed_connection_takes_its_subscriptions_with_it(shard, feed):
    publisher, sub = feed
    sub.change(True, "t", "u")
    assert set(publisher.subscribers) == {"t", "u"}
    sub.sock.close()
    sub.turn()                              # the publisher reads the end of the stream
    assert publisher.subscribers == {} and publisher.watched == {}
    shard.append("t", rec(b'{"x":1}'))
    publish(publisher, shard, "t")
    assert publisher.published == 0


class CountingEngine:
    def __init__(self):
        self.diffs = []

    async def call(self, topic, msg, wait_ms=0):
        self.diffs.append(msg)
        return {"records": [], "next_from_seq": msg.from_seq, "head_seq": msg.from_seq,
                "caught_up": True, "tombstone": None}


def view(**changes) -> ReadView:
    options = dict(node=None, limit=0, max_batch_bytes=0, include_meta=True,
                   include_tags=False, include_data=True)
    options.update(changes)
    return ReadView(**options)


PAGE = NotePage(4, 6, 1, True, 14, [[5, 100, b'{"d":{"a":1}}', "tag", None, False],
                                    [6, 101, b'{"d":2}', None, "w1", False]])


def read(offer: NotePage | None, cursor: int, options: ReadView):
    async def go():
        engine = CountingEngine()
        reads = SharedReads(engine)
        if offer is not None:
            reads.offer("t", offer)
        return await reads.page("t", cursor, options), engine.diffs
    return asyncio.run(go())


def test_a_watcher_at_the_page_start_reads_it_without_asking_the_shard():
    page, diffs = read(PAGE, 4, view())
    assert diffs == [] and (page.next_from_seq, page.head_seq, page.caught_up) == (6, 6, True)
    assert b'"records":[{"$seq":5,"$ts":100,"data":{"a":1}},' \
           b'{"$seq":6,"$ts":101,"$node":"w1","data":2}]' in page.records
    tagged, _ = read(PAGE, 4, view(include_tags=True))
    assert b'"$tag":"tag"' in tagged.records


@pytest.mark.parametrize("cursor,options", [
    (3, view()),                                   # another cursor
    (4, view(limit=1)),                            # the diff would stop after one
    (4, view(max_batch_bytes=10)),                 # ... or at its byte budget
])
def test_anything_else_reads_from_the_shard(cursor, options):
    _, diffs = read(PAGE, cursor, options)
    assert len(diffs) == 1 and diffs[0].from_seq == cursor


def test_a_node_filter_is_applied_to_the_page_as_a_diff_applies_it():
    page, diffs = read(PAGE, 4, view(node="w1"))       # dedupe_node: seq 6 is left out
    assert diffs == [] and (page.next_from_seq, page.caught_up) == (6, True)
    assert b'"$seq":5' in page.records and b'"$seq":6' not in page.records
    page, diffs = read(PAGE, 4, view(node=("w1", "w9"), limit=1))   # one record left
    assert diffs == [] and b'"$seq":6' not in page.records
    only_w1 = NotePage(4, 5, 1, True, 7, [[5, 1, b'{"d":2}', None, "w1", False]])
    page, diffs = read(only_w1, 4, view(node="w1"))     # nothing left: no record frame
    assert diffs == [] and page.records is None and page.next_from_seq == 5
    page, diffs = read(NotePage(4, 6, 1, False, 14, PAGE.records), 4, view(node="w1"))
    assert diffs == [] and b'"$seq":6' in page.records  # without dedupe_node: no filter


def test_a_commit_without_a_page_forgets_the_last_one():
    async def go():
        engine = CountingEngine()
        reads = SharedReads(engine)
        reads.offer("t", PAGE)
        reads.invalidate("t")                      # the next notification had no page
        await reads.page("t", 4, view())
        return engine.diffs
    assert len(asyncio.run(go())) == 1
