"""WAL frame types and header flag bits (spec/storage.md 1.3): the vocabulary that the
frame codec (frame.py) and the control frame bodies (frame_body.py) share."""

from __future__ import annotations

import enum

FLAG_TAG = 1
FLAG_NODE = 2
FLAG_DURABLE = 4
FLAG_META = 8
# Bits 4-7 of an Append's flags (ours): how many routers the record has passed through
# (0-15; forwarding stops at the hop cap, topics_actors/ledger/router_state.py).
HOPS_SHIFT = 4
HOPS_MASK = 0xF0


class FrameType(enum.IntEnum):
    APPEND = 1
    TOPIC_CREATE = 2
    TOPIC_DELETE = 3
    ROUTER_CREATE = 4
    ROUTER_DELETE = 5
    DELETE = 6
    EVICT_WATERMARK = 7
    CHECKPOINT_MARK = 8
    CONFIG_UPDATE = 9
    LEASE = 10
    HEAD_WATERMARK = 11
    IDEM_KEY = 12
    ROUTER_CURSOR = 13
    FILLER = 14      # a repaired frame's bytes: no meaning, keeps the offsets of the rest
    EPOCH = 15       # a replicated topic's leader epoch starts at this frame's seq (body: u64)
    REPL_OP = 16     # a replicated topic's op (a record delete) number seq, not applied yet
    OPS_COMMIT = 17  # the topic's ops up to seq are applied (logged with their Delete frames)
    OPS_DROP = 18    # the topic's ops not applied are dropped (a new leader never had them)
    TRUNCATE = 19    # a follower's records after seq are dropped (its log diverged from the
                     # leader's there); the same seqs are written again (body: u64, = seq)
    APPEND_BATCH = 20  # plain records of one topic at consecutive seqs (storage/batch_frame.py)


KNOWN_TYPES = frozenset(int(t) for t in FrameType)
