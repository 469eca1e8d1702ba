"""Commit notifications that carry their page (protocol/commit_feed.py): the shard's
publisher notifies only topics a gateway subscribes to, and the page is the diff a
watcher at the previous notification's head would read; the gateway's SharedReads serves
such a watcher from it, and only when the watcher's read options would read exactly it.

Method: a shard harness (no sockets) whose commits feed a real CommitPublisher on an ipc
XPUB socket, a SUB socket in the test, and SharedReads over an engine that counts diffs.
"""

import asyncio

import pytest
import zmq

from tests.unit.test_shard_core import rec
from topics_actors.gateway.shared_reads import ReadView, SharedReads
from topics_actors.protocol.commit_feed import NotePage, decode_note, topic_filter
from topics_actors.protocol.messages import Diff
from topics_actors.shard import diff_read
from topics_actors.shard.commit_publisher import CommitPublisher

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def feed(tmp_path):
    ctx = zmq.Context()
    publisher = CommitPublisher(ctx, f"ipc://{tmp_path}/shard-00.sock")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(publisher.endpoint)
    yield publisher, sub
    sub.close(0)
    publisher.close()
    ctx.term()


def publish(publisher, shard, *names):
    def read_page(topic, msg):
        return diff_read.diff(topic, shard.core.reader.read, msg, shard.core.stager.clock())
    publisher.publish(set(names), shard.core.registry, read_page)


def note_of(sub):
    assert sub.poll(5000), "no notification"
    return decode_note(sub.recv_multipart())


def change(publisher, sub, option, prefix: bytes) -> None:
    """Subscribe or unsubscribe, and wait until the XPUB socket has taken it in."""
    sub.setsockopt(option, prefix)
    assert publisher.sock.poll(5000), "the (un)subscription never arrived"
    publisher._take_subscriptions()


def test_only_watched_topics_get_pages_and_a_page_is_the_diff_from_the_last_head(shard, feed):
    publisher, sub = feed
    shard.append("t", rec(b'{"x":1}', tag="a"))
    change(publisher, sub, zmq.SUBSCRIBE, b"")     # everything, but no topic subscription
    publish(publisher, shard, "t")
    assert not sub.poll(100) and publisher.published == 0     # nobody watches t: no note
    change(publisher, sub, zmq.SUBSCRIBE, topic_filter("t"))
    assert "t" in publisher.watched
    publish(publisher, shard, "t")          # the first since subscribing: no page yet
    first = note_of(sub)
    assert first.head == 1 and first.page is None
    shard.append("t", rec(b'{"x":2}', tag="b"), rec(b'{"x":3}', node="n"))
    publish(publisher, shard, "t")
    page = note_of(sub).page
    expected = shard.call(Diff("t", 1, 0, None, True, True, 0, 0))
    assert (page.from_seq, page.head_seq) == (1, 3)
    assert page.records == expected["records"]
    assert page.bytes == len(b'{"x":2}') + len(b'{"x":3}')
    change(publisher, sub, zmq.UNSUBSCRIBE, topic_filter("t"))
    assert "t" not in publisher.watched


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
