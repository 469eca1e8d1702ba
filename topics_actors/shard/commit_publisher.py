"""The shard's side of the commit feed (topics_actors/protocol/commit_feed.py): after a
commit, one notification per woken topic on a PUB socket next to the ipc request socket.

Publishing never blocks the shard's loop: sends are NOBLOCK and the PUB socket drops what a
slow or absent subscriber cannot take (SNDHWM). A dropped notification loses no record for a
watcher: notifications carry no records, only "topic X has head H now"; the watcher reads
from its own cursor, and the next notification of that topic, or the read its stream makes
after every heartbeat interval of silence, brings everything up to the head.
"""

from __future__ import annotations

import zmq

from topics_actors.protocol.commit_feed import FEED_HWM_MESSAGES, encode_note, feed_endpoint
from topics_actors.shard.topic_registry import TopicRegistry


class CommitPublisher:
    def __init__(self, ctx: zmq.Context, ipc: str):
        self.endpoint = feed_endpoint(ipc)
        self.sock = ctx.socket(zmq.PUB)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, FEED_HWM_MESSAGES)):
            self.sock.setsockopt(option, value)
        self.sock.bind(self.endpoint)
        self.published = 0
        self.dropped = 0

    def publish(self, woken: set[str], registry: TopicRegistry) -> None:
        for name in woken:
            topic = registry.get(name)
            try:
                self.sock.send_multipart(
                    encode_note(name, None if topic is None else topic.visible), zmq.NOBLOCK)
                self.published += 1
            except zmq.ZMQError:
                self.dropped += 1
        woken.clear()

    def close(self) -> None:
        self.sock.close(0)
