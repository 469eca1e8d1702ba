"""The shard's side of the commit feed (topics_actors/protocol/commit_feed.py): the feed
socket the node's gateways connect to, their subscriptions, and after a commit one note per
woken topic to each gateway that subscribes to it.

Publishing never blocks the shard's loop: a note is written at once as far as the socket
takes it, and the rest waits in the connection's buffer (LaneListener); a gateway that
stops reading is cut off once that buffer passes its bound. A lost note loses no record for
a watcher: the watcher reads from its own cursor, and the next note of that topic, or the
read its stream makes after every heartbeat interval of silence, brings everything up to
the head.

Only subscribed topics' notes carry a page (the records since the previous note, read
once here for every subscriber), so a shard whose topics nobody watches reads nothing for
the feed and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import logging

import zmq

from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.commit_feed import (
    PAGE_BYTES_MAX, PAGE_RECORDS_MAX, NotePage, decode_subscription, encode_note, feed_path,
)
from topics_actors.protocol.messages import Diff
from topics_actors.record_envelope import meta_flag_of, payload_bytes
from topics_actors.shard.lane_listener import LaneListener
from topics_actors.shard.topic_registry import TopicRegistry

log = logging.getLogger(__name__)

# What reads a page: diff_read.diff bound to the shard's reader and clock.
PageReader = Callable[[TopicState, Diff], dict]


class CommitPublisher:
    def __init__(self, poller: zmq.Poller, ipc: str):
        self.lanes = LaneListener(feed_path(ipc), poller, self._forget)
        self.watched: dict[str, int | None] = {}   # topic -> head of its last note
        self.subscribers: dict[str, set[bytes]] = {}   # topic -> its subscribers' peers
        self.topics_of: dict[bytes, set[str]] = {}     # peer -> the topics it subscribes
        self.published = 0
        self.dropped = 0
        self.pages = 0

    def ready(self, ready: list) -> None:
        """Take what the poll found on the feed socket: new gateways, subscriptions, and
        room for notes that waited."""
        lanes = self.lanes
        for fd, events in ready:
            if type(fd) is int and lanes.owns(fd):
                for peer, raws in lanes.ready(fd, events):
                    for raw in raws:
                        self._subscribe(peer[1:], raw)

    def publish(self, woken: set[str], registry: TopicRegistry, read_page: PageReader) -> None:
        """Notify the woken topics' subscribers: one note per topic, encoded once."""
        subscribers, out = self.subscribers, {}
        for name in woken:
            peers = subscribers.get(name)
            if not peers:
                continue
            topic = registry.get(name)
            head = None if topic is None else topic.visible
            page = self._page(topic, self.watched[name], read_page)
            self.watched[name] = head
            raw = encode_note(name, head, page)
            for peer in peers:
                out.setdefault(peer, []).append(raw)
        woken.clear()
        for peer, raws in out.items():
            if self.lanes.send(peer, raws):
                self.published += len(raws)
            else:
                self.dropped += len(raws)

    def _page(self, topic: TopicState | None, from_seq: int | None,
              read_page: PageReader) -> NotePage | None:
        """The page a diff from `from_seq` reads now, if a watcher can take it as it is."""
        if topic is None or from_seq is None or from_seq >= topic.visible:
            return None
        reply = read_page(topic, Diff(topic.name, from_seq, PAGE_RECORDS_MAX, None, True,
                                      True, 0, PAGE_BYTES_MAX))
        if reply["tombstone"] is not None or not reply["caught_up"] or not reply["records"]:
            return None
        records = reply["records"]
        self.pages += 1
        return NotePage(from_seq, reply["head_seq"], reply["earliest_seq"],
                        topic.config.dedupe_node,
                        sum(payload_bytes(len(r[2]), meta_flag_of(r[5])) for r in records),
                        records)

    def _subscribe(self, peer: bytes, raw: bytes) -> None:
        change = decode_subscription(raw)
        if change is None:
            log.warning("event=bad_feed_subscription bytes=%d", len(raw))
            return
        subscribed, names = change
        mine = self.topics_of.setdefault(peer, set())
        for name in names:
            if subscribed:
                mine.add(name)
                if name not in self.subscribers:
                    self.watched[name] = None    # its next note carries no page yet
                self.subscribers.setdefault(name, set()).add(peer)
            else:
                mine.discard(name)
                self._unsubscribe(peer, name)

    def _unsubscribe(self, peer: bytes, name: str) -> None:
        peers = self.subscribers.get(name)
        if peers is None:
            return
        peers.discard(peer)
        if not peers:
            del self.subscribers[name]
            del self.watched[name]

    def _forget(self, peer: bytes) -> None:
        """A gateway's feed connection closed: its subscriptions go with it."""
        for name in self.topics_of.pop(peer, ()):
            self._unsubscribe(peer, name)

    def close(self) -> None:
        self.lanes.close()
