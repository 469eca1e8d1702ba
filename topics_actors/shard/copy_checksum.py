"""A checksum of one copy of a topic over a seq range (docs/CLUSTER.md 9): how an operator
checks that the replicas of a topic agree without reading them whole.

Any copy answers for itself, leader or follower (replica_rules.py lets `checksum` through
on every replica), so the gateway can ask each in-sync replica for the same range and
compare (gateway/copy_compare.py). The digest is xxh3-64 over each stored record in the
range, in seq order: its seq, timestamp, envelope (data and meta), tag and node, each
length-prefixed, so two copies agree exactly when they hold the same records at the same
seqs. Holes (deleted or never written seqs) add nothing, so a delete is in the digest once
applied. A request covers at most CHECKSUM_RECORDS_MAX seqs (the loop runs in the shard's
turn); `next_from_seq` says where the next one starts.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import xxhash

from topics_actors.errors import invalid, topic_not_found
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import Checksum
from topics_actors.shard.batch_stager import BatchStager, Staged, read_op
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage.file_table import StoredRecord

CHECKSUM_RECORDS_MAX = 100_000      # seqs one request walks (about 0.1-0.3 s of a shard)
_HEAD = struct.Struct("<QqI")       # seq, ts, envelope length


def _text(value: str | None) -> bytes:
    raw = b"" if value is None else value.encode()
    return struct.pack("<i", -1 if value is None else len(raw)) + raw


def checksum(topic: TopicState, read: Callable[[TopicState, int], StoredRecord | None],
             from_seq: int, to_seq: int) -> dict:
    """The digest of `topic`'s records in [from_seq, to_seq]: from its earliest seq at the
    lowest, to its high watermark by default and to its own log end at most (a follower
    in sync holds up to the leader's watermark, which may be ahead of its own)."""
    if from_seq < 0 or to_seq < 0:
        raise invalid("checksum fields from_seq and to_seq must not be negative")
    first = max(from_seq, topic.earliest_seq(), 1)
    last = min(to_seq or topic.visible, topic.head)
    end = min(last, first + CHECKSUM_RECORDS_MAX - 1)
    digest, records = xxhash.xxh3_64(), 0
    for seq in range(first, end + 1):
        rec = read(topic, seq)
        if rec is None:
            continue
        digest.update(_HEAD.pack(rec.seq, rec.ts, len(rec.envelope)))
        digest.update(rec.envelope)
        digest.update(_text(rec.tag) + _text(rec.node))
        records += 1
    return {"topic": topic.name, "from_seq": first, "to_seq": max(end, first - 1),
            "records": records, "checksum": digest.hexdigest(),
            "next_from_seq": end + 1 if end < last else None, "until_seq": last,
            "head_seq": topic.head, "hw": topic.visible}


def request(registry: TopicRegistry, reader: RecordReader, msg: Checksum) -> Staged:
    """The shard's handler of `checksum`: a read of this copy, after the turn's commit."""
    def answer(_info) -> dict:
        topic = registry.get(msg.topic)
        if topic is None:
            raise topic_not_found(msg.topic)
        return checksum(topic, reader.read, msg.from_seq, msg.to_seq)
    return read_op(answer)
