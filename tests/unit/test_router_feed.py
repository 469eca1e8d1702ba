"""The router feed's routing of its reads (shard/routers/router_feed.py), without sockets: a
source in the router's own shard is read through the core in-process, a source in another
shard over that shard's lane; a lane that closes ends its reads at once, and they go again
after RETRY_MS, not before; an answer becomes a RouterPass from the cursor it was read at."""

import pytest
import zmq

from topics_actors.protocol import decode, encode_reply
from topics_actors.protocol.messages import Diff
from topics_actors.shard.routers import router_feed
from topics_actors.shard.routers.router_book import RouterPass
from topics_actors.shard.routers.router_feed import RouterFeed
from topics_actors.topic_identity import shard_of_name

pytestmark = pytest.mark.timeout(10)
OWN, OTHER = 0, 1                  # the feed's shard of 2, and the other


class Book:
    def __init__(self, source: str, cursor: int = 4):
        self.routers = [("r", source, cursor)]

    def feeds(self):
        return self.routers


class Lanes:
    """LaneLinks as the feed sees it: what was sent to which shard, and whether it is up."""

    def __init__(self):
        self.sent: list[tuple[int, object]] = []
        self.up = True
        self.links = {}

    def send(self, shard: int, raw: bytes) -> bool:
        if self.up:
            self.sent.append((shard, decode(raw)))
        return self.up

    def close(self):
        pass


def feed_for(source: str):
    own, passes = [], []
    feed = RouterFeed(Book(source), zmq.Poller(), "/nonexistent", OWN, 2, passes.append,
                      lambda msg, corr: own.append((corr, msg)))
    feed.lanes = Lanes()
    return feed, own, passes


def page(from_seq: int, to_seq: int) -> dict:
    return {"records": [[to_seq, 0, b"x", None, None, False, 0]], "next_from_seq": to_seq,
            "head_seq": to_seq, "tombstone": None}


def test_a_source_in_the_routers_shard_is_read_in_process():
    assert shard_of_name("a", 2) == OWN
    feed, own, passes = feed_for("a")
    feed.pump([])
    assert feed.lanes.sent == [] and len(own) == 1
    corr, msg = own[0]
    assert type(msg) is Diff and msg.from_seq == 4 and msg.wait_ms == router_feed.WAIT_MS
    feed.pump([])
    assert len(own) == 1                          # one read in flight per router
    feed.answered(encode_reply(corr, page(4, 5)))
    assert passes == [RouterPass("r", 4, page(4, 5))]


def test_a_source_in_another_shard_is_read_over_its_lane_and_a_lost_lane_retries(monkeypatch):
    assert shard_of_name("src", 2) == OTHER
    feed, own, passes = feed_for("src")
    clock = [100.0]
    monkeypatch.setattr(router_feed.time, "monotonic", lambda: clock[0])
    feed.pump([])
    assert own == [] and [(s, type(m)) for s, (_c, m) in feed.lanes.sent] == [(OTHER, Diff)]
    feed._lost(OTHER)                            # that shard restarted: no answer will come
    assert feed.in_flight == {} and not feed.busy
    feed.pump([])
    assert len(feed.lanes.sent) == 1             # not before RETRY_MS
    clock[0] += router_feed.RETRY_MS / 1000
    feed.lanes.up = False                        # still down: refused, retried later
    feed.pump([])
    assert len(feed.lanes.sent) == 1 and feed.in_flight == {}
    clock[0] += router_feed.RETRY_MS / 1000
    feed.lanes.up = True
    feed.pump([])
    corr = feed.lanes.sent[-1][1][0]
    assert len(feed.lanes.sent) == 2
    feed._reply(encode_reply(corr, page(4, 9)), clock[0])
    assert passes == [RouterPass("r", 4, page(4, 9))]
