"""The shard's side of the commit feed (topics_actors/protocol/commit_feed.py): after a
commit, one notification per woken topic on an XPUB socket next to the ipc request socket.

Publishing never blocks the shard's loop: sends are NOBLOCK and the socket drops what a
slow or absent subscriber cannot take (SNDHWM). A dropped notification loses no record for
a watcher: the watcher reads from its own cursor, and the next notification of that topic,
or the read its stream makes after every heartbeat interval of silence, brings everything
up to the head.

Which topics some gateway watches arrives on the same socket (XPUB passes the first
subscription of a topic and the last unsubscription up): only those topics' notifications
carry a page (the records since the previous notification, read once here), so a shard
whose topics nobody watches reads nothing for the feed.
"""

from __future__ import annotations

from collections.abc import Callable

import zmq

from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.commit_feed import (
    FEED_HWM_MESSAGES, PAGE_BYTES_MAX, PAGE_RECORDS_MAX, SUBSCRIPTIONS_HWM, NotePage,
    decode_subscription, encode_note, feed_endpoint,
)
from topics_actors.protocol.messages import Diff
from topics_actors.record_envelope import meta_flag_of, payload_bytes
from topics_actors.shard.topic_registry import TopicRegistry

# What reads a page: diff_read.diff bound to the shard's reader and clock.
PageReader = Callable[[TopicState, Diff], dict]


class CommitPublisher:
    def __init__(self, ctx: zmq.Context, ipc: str):
        self.endpoint = feed_endpoint(ipc)
        self.sock = ctx.socket(zmq.XPUB)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, FEED_HWM_MESSAGES),
                              (zmq.RCVHWM, SUBSCRIPTIONS_HWM)):
            self.sock.setsockopt(option, value)
        self.sock.bind(self.endpoint)
        self.watched: dict[str, int | None] = {}   # topic -> head of its last notification
        self.published = 0
        self.dropped = 0
        self.pages = 0

    def publish(self, woken: set[str], registry: TopicRegistry, read_page: PageReader) -> None:
        """Notify the woken topics some gateway subscribes to (XPUB would drop the others
        anyway, after their encoding and a hand-off to ZeroMQ's I/O thread). A subscription
        not yet read here misses at most this note: a gateway wakes its streams once more
        shortly after it subscribes (gateway/commit_listener.py)."""
        self._take_subscriptions()
        watched = self.watched
        for name in woken:
            if name not in watched:
                continue
            topic = registry.get(name)
            head = None if topic is None else topic.visible
            page = self._page(topic, watched[name], read_page)
            watched[name] = head
            try:
                self.sock.send_multipart(encode_note(name, head, page), zmq.NOBLOCK)
                self.published += 1
            except zmq.ZMQError:
                self.dropped += 1
        woken.clear()

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

    def _take_subscriptions(self) -> None:
        sock = self.sock
        if not sock.get(zmq.EVENTS) & zmq.POLLIN:     # the usual case, without an exception
            return
        while True:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            change = decode_subscription(frame)
            if change is None:
                continue
            subscribed, name = change
            if subscribed:
                self.watched[name] = None    # its next notification carries no page yet
            else:
                self.watched.pop(name, None)

    def close(self) -> None:
        self.sock.close(0)
