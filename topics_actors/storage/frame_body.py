"""Bodies of the control frames (spec/storage.md 1.3); lp = u32 length + bytes.

decode_body raises ValueError (or struct.error) on any malformed body, including leftover
bytes: a scan treats such a frame as the end of the log.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import msgpack

from topics_actors.storage.frame_types import FrameType

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_EVICT = struct.Struct("<QQQ")
_LEASE = struct.Struct("<BQQQ")

MATCH_EQ = 0
MATCH_GLOB = 1


class TopicBody(NamedTuple):          # TopicCreate (2), TopicDelete (3), ConfigUpdate (9)
    name: str
    config: bytes


class RouterCreateBody(NamedTuple):   # 4
    name: str
    source: str
    dest: str
    bits: int
    match: tuple[int, str] | None
    initial_cursor: int
    initial_dest_base: int


class RouterDeleteBody(NamedTuple):   # 5
    name: str


class RouterCursorBody(NamedTuple):   # 13 (ours): a router's progress, in its dest's shard
    name: str
    cursor: int            # source seqs up to here are forwarded (or passed over)
    forwarded_total: int
    trim_first: int        # dest seqs trim_first..trim_last stand for source records that
    trim_last: int         # were evicted before the router read them (0, 0: none)


class DeleteBody(NamedTuple):         # 6
    before_seq: int | None
    match: tuple[int, str] | None
    seqs: tuple[int, ...]
    bound_head: int | None


class EvictBody(NamedTuple):          # 7: note the order of the fields on disk
    evict_floor: int
    earliest_seq: int
    expiry_floor: int


class LeaseBody(NamedTuple):          # 10
    event: int
    lease_id: int
    deadline_ms: int
    deliveries: int
    node: str


class IdemKeyBody(NamedTuple):        # 12 (ours): the key of a batch ending at the frame's seq
    key: str
    count: int


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple:
        values = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return values

    def u8(self) -> int:
        return self.take(_U8)[0]

    def u32(self) -> int:
        return self.take(_U32)[0]

    def u64(self) -> int:
        return self.take(_U64)[0]

    def lp(self) -> bytes:
        n = self.u32()
        if self.pos + n > len(self.data):
            raise ValueError("length-prefixed field overruns the body")
        value = self.data[self.pos:self.pos + n]
        self.pos += n
        return value

    def text(self) -> str:
        return self.lp().decode("utf-8")

    def match(self) -> tuple[int, str] | None:
        if not self.u8():
            return None
        op = self.u8()
        if op not in (MATCH_EQ, MATCH_GLOB):
            raise ValueError("unknown match op")
        return op, self.text()

    def rest(self) -> bytes:
        value, self.pos = self.data[self.pos:], len(self.data)
        return value

    def finish(self, value):
        if self.pos != len(self.data):
            raise ValueError("leftover bytes after the body")
        return value


def _lp(value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return _U32.pack(len(raw)) + raw


def _match(match: tuple[int, str] | None) -> bytes:
    if match is None:
        return b"\x00"
    return b"\x01" + _U8.pack(match[0]) + _lp(match[1])


def encode_topic(name: str, config: bytes) -> bytes:
    return _lp(name) + _lp(config)


def encode_router_create(b: RouterCreateBody) -> bytes:
    return (_lp(b.name) + _lp(b.source) + _lp(b.dest) + _U8.pack(b.bits) + _match(b.match)
            + _U64.pack(b.initial_cursor) + _U64.pack(b.initial_dest_base))


def encode_router_delete(name: str) -> bytes:
    return _lp(name)


def encode_router_cursor(b: RouterCursorBody) -> bytes:
    return (_lp(b.name) + _U64.pack(b.cursor) + _U64.pack(b.forwarded_total)
            + _U64.pack(b.trim_first) + _U64.pack(b.trim_last))


def encode_delete(b: DeleteBody) -> bytes:
    out = b"\x00" if b.before_seq is None else b"\x01" + _U64.pack(b.before_seq)
    out += _match(b.match) + _U32.pack(len(b.seqs))
    out += b"".join(_U64.pack(s) for s in b.seqs)
    out += b"\x00" if b.bound_head is None else b"\x01" + _U64.pack(b.bound_head)
    return out


def encode_evict(b: EvictBody) -> bytes:
    return _EVICT.pack(b.evict_floor, b.earliest_seq, b.expiry_floor)


def encode_u64(value: int) -> bytes:
    """CheckpointMark (8) and HeadWatermark (11) bodies."""
    return _U64.pack(value)


def encode_lease(b: LeaseBody) -> bytes:
    return _LEASE.pack(b.event, b.lease_id, b.deadline_ms, b.deliveries) + _lp(b.node)


def encode_idem_key(key: str, count: int) -> bytes:
    return _lp(key) + _U32.pack(count)


def encode_op(epoch: int, op: list) -> bytes:
    """A REPL_OP body: the leader epoch, then the op (ledger/op_log.py) as msgpack."""
    return _U64.pack(epoch) + msgpack.packb(op)


def _op(r: _Reader):
    epoch = r.u64()
    op = msgpack.unpackb(r.rest())
    if not (_delete_op(op) or _seqs_op(op)):
        raise ValueError("unknown replicated op")
    return epoch, op


def _delete_op(op) -> bool:
    """["delete", before_seq | None, [match op, value] | None, bound]"""
    return (isinstance(op, list) and len(op) == 4 and op[0] == "delete"
            and (op[1] is None or isinstance(op[1], int))
            and (op[2] is None or (isinstance(op[2], list) and len(op[2]) == 2))
            and isinstance(op[3], int))


def _seqs_op(op) -> bool:
    """["seqs", [seq, ...]]: a queue's acked jobs"""
    return (isinstance(op, list) and len(op) == 2 and op[0] == "seqs"
            and isinstance(op[1], list) and bool(op[1])
            and all(isinstance(s, int) and s > 0 for s in op[1]))


def _topic(r: _Reader):
    return TopicBody(r.text(), r.lp())


def _router_create(r: _Reader):
    return RouterCreateBody(r.text(), r.text(), r.text(), r.u8(), r.match(), r.u64(), r.u64())


def _delete(r: _Reader):
    before = r.u64() if r.u8() else None
    match = r.match()
    count = r.u32()
    if r.pos + 8 * count > len(r.data):
        raise ValueError("delete seq list overruns the body")
    seqs = tuple(r.u64() for _ in range(count))
    bound = r.u64() if r.u8() else None
    return DeleteBody(before, match, seqs, bound)


def _evict(r: _Reader):
    if len(r.data) != _EVICT.size:
        raise ValueError("EvictWatermark body must be 24 bytes")
    return EvictBody(*r.take(_EVICT))


def _lease(r: _Reader):
    event, lease_id, deadline, deliveries = r.take(_LEASE)
    if event > 5:   # 4 and 5 (ours): dead-lettered, moving to a dead-letter topic
        raise ValueError("unknown lease event")
    return LeaseBody(event, lease_id, deadline, deliveries, r.text())


_DECODERS = {
    FrameType.TOPIC_CREATE: _topic,
    FrameType.TOPIC_DELETE: _topic,
    FrameType.CONFIG_UPDATE: _topic,
    FrameType.ROUTER_CREATE: _router_create,
    FrameType.ROUTER_DELETE: lambda r: RouterDeleteBody(r.text()),
    FrameType.DELETE: _delete,
    FrameType.EVICT_WATERMARK: _evict,
    FrameType.CHECKPOINT_MARK: lambda r: r.u64(),
    FrameType.LEASE: _lease,
    FrameType.HEAD_WATERMARK: lambda r: r.u64(),
    FrameType.IDEM_KEY: lambda r: IdemKeyBody(r.text(), r.u32()),
    FrameType.ROUTER_CURSOR:
        lambda r: RouterCursorBody(r.text(), r.u64(), r.u64(), r.u64(), r.u64()),
    FrameType.FILLER: lambda r: r.rest(),
    FrameType.EPOCH: lambda r: r.u64(),
    FrameType.REPL_OP: _op,
    FrameType.OPS_COMMIT: lambda r: r.u64(),
    FrameType.OPS_DROP: lambda r: r.u64(),
    FrameType.TRUNCATE: lambda r: r.u64(),
}


def decode_body(ftype: int, data: bytes):
    """Decode a control frame body; Append and AppendBatch bodies are returned as given."""
    if ftype == FrameType.APPEND or ftype == FrameType.APPEND_BATCH:
        return data
    reader = _Reader(data)
    return reader.finish(_DECODERS[FrameType(ftype)](reader))
