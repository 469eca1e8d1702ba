"""Exact head marks: how a shard settles its disk-class head reservations.

A disk-class topic's HeadWatermark reserves seqs ahead of the head (spec/storage.md 2.3), so
a crash can never reissue an acked seq. Settling the reservations writes one exact mark per
topic (HeadWatermark with seq == ceiling), which replay takes as "nothing above this head
was acked".

A replicated topic's copy is not padded at recovery: its log may have lost a tail that other
copies hold, and holes in its place would hide that from them. It keeps its reservation and
pads only when it next leads, in a new leader epoch whose start marks where its log ended
(shard/replication/leader_duties.py); meanwhile it follows, from its own log end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage import frame_body
from topics_actors.storage.frame import encode
from topics_actors.storage.frame_types import FLAG_DURABLE, FrameType
from topics_actors.storage.wal_writer import WalWriter


def seal_reservations(topics: Iterable[TopicState], writer: WalWriter,
                      clock: Callable[[], int], pad: bool) -> None:
    """Log an exact head mark for every topic holding a reservation above its head.

    After a crash (pad=True) a reserved seq may have been acked and lost, so the head
    jumps to the reservation and the skipped seqs stay holes. At a clean shutdown
    (pad=False) everything acked is synced, so the reservation is simply released.
    """
    buf, now = bytearray(), clock()
    for topic in topics:
        if pad and topic.config.replicated:
            continue                   # padded when it leads again (see above)
        if topic.reserved_head > topic.head:
            if pad:
                topic.pad_to(topic.reserved_head)
            if topic.head:
                encode(buf, FrameType.HEAD_WATERMARK, FLAG_DURABLE, topic.tid, topic.head,
                       now, frame_body.encode_u64(topic.head))
            topic.reserved_head = topic.head
    if buf:
        writer.write(buf)
        writer.sync()
