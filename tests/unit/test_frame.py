"""WAL frame codec v2 (spec/storage.md 1.3): round trips and every corruption kind."""

from __future__ import annotations

import random
import struct

import pytest
import xxhash

from topics_actors.record_envelope import build as append_envelope
from topics_actors.record_envelope import payload_bytes
from topics_actors.storage import frame_body as fb
from topics_actors.storage.frame import (
    CHECKSUM, FRAME_LEN_MIN, HEADER, HEADER_BYTES, decode_at, encode, encode_frame,
)
from topics_actors.storage.frame_types import (
    FLAG_DURABLE, FLAG_META, FLAG_NODE, FLAG_TAG, FrameType,
)

T = FrameType


def decode(buf: bytes, offset: int = 0):
    return decode_at(buf, offset, len(buf))


def raw_frame(ftype: int, data: bytes = b"", node: bytes = b"", tag: bytes = b"",
              flags: int = 0, topic_id: int = 7, seq: int = 3, ts: int = 11,
              frame_len: int | None = None, lens: tuple | None = None) -> bytes:
    """A frame built by hand with a *correct* checksum over whatever the header says."""
    node_len, tag_len, data_len = lens or (len(node), len(tag), len(data))
    sections = node + tag + data
    if frame_len is None:
        frame_len = 34 + len(sections) + 8
    body = HEADER.pack(frame_len, ftype, flags, topic_id, seq, ts,
                       node_len, tag_len, data_len)[4:] + sections
    return struct.pack("<I", frame_len) + body + CHECKSUM.pack(xxhash.xxh3_64_intdigest(body))


def checksum_ok(buf, offset: int, size: int) -> bool:
    stored = CHECKSUM.unpack_from(buf, offset + size - 8)[0]
    return xxhash.xxh3_64_intdigest(bytes(buf[offset + 4:offset + size - 8])) == stored


ROUTER = fb.RouterCreateBody("r1", "src", "dst", 0b10101, (fb.MATCH_GLOB, "ord*"), 17, 99)
BODIES = [
    (T.TOPIC_CREATE, fb.encode_topic("orders", b'{"durable":true}'),
     fb.TopicBody("orders", b'{"durable":true}')),
    (T.TOPIC_DELETE, fb.encode_topic("orders", b""), fb.TopicBody("orders", b"")),
    (T.CONFIG_UPDATE, fb.encode_topic("ördérs", b"{}"), fb.TopicBody("ördérs", b"{}")),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER), ROUTER),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER._replace(match=None, bits=0)),
     ROUTER._replace(match=None, bits=0)),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER._replace(match=(fb.MATCH_EQ, "")))
     , ROUTER._replace(match=(fb.MATCH_EQ, ""))),
    (T.ROUTER_DELETE, fb.encode_router_delete("r1"), fb.RouterDeleteBody("r1")),
    (T.ROUTER_DELETE, fb.encode_router_delete(""), fb.RouterDeleteBody("")),
    (T.DELETE, fb.encode_delete(fb.DeleteBody(None, None, (), None)),
     fb.DeleteBody(None, None, (), None)),
    (T.DELETE, fb.encode_delete(fb.DeleteBody(40, (fb.MATCH_EQ, "tag-é"), (1, 5, 2**64 - 1), 77)),
     fb.DeleteBody(40, (fb.MATCH_EQ, "tag-é"), (1, 5, 2**64 - 1), 77)),
    (T.EVICT_WATERMARK, fb.encode_evict(fb.EvictBody(10, 11, 9)), fb.EvictBody(10, 11, 9)),
    (T.CHECKPOINT_MARK, fb.encode_u64(0), 0),
    (T.LEASE, fb.encode_lease(fb.LeaseBody(3, 5, 1234, 2, "worker-1")),
     fb.LeaseBody(3, 5, 1234, 2, "worker-1")),
    (T.LEASE, fb.encode_lease(fb.LeaseBody(0, 0, 0, 0, "")), fb.LeaseBody(0, 0, 0, 0, "")),
    (T.LEASE, fb.encode_lease(fb.LeaseBody(4, 0, 0, 1, "")), fb.LeaseBody(4, 0, 0, 1, "")),
    (T.HEAD_WATERMARK, fb.encode_u64(257), 257),
    (T.IDEM_KEY, fb.encode_idem_key("~abc:1", 3), fb.IdemKeyBody("~abc:1", 3)),
    (T.APPEND, append_envelope(b'{"x":1}', b'{"m":2}'), b'{"d":{"x":1},"m":{"m":2}}'),
]


@pytest.mark.parametrize("ftype,data,body", BODIES,
                         ids=[f"{t.name}-{i}" for i, (t, _, _) in enumerate(BODIES)])
def test_round_trip_every_frame_type_with_its_body(ftype, data, body):
    buf = bytearray(b"\x00" * 5)          # frames start anywhere in a buffer
    size = encode(buf, ftype, FLAG_DURABLE, 0xDEADBEEF, 42, 1_700_000_000_000, data)
    assert size == len(buf) - 5 == 46 + len(data)
    frame = decode_at(buf, 5, len(buf))
    assert frame is not None
    assert (frame.type, frame.topic_id, frame.seq, frame.ts) == (ftype, 0xDEADBEEF, 42,
                                                               1_700_000_000_000)
    assert frame.flags == FLAG_DURABLE and frame.node is None and frame.tag is None
    assert (frame.data, frame.offset, frame.size) == (data, 5, size)
    assert fb.decode_body(ftype, frame.data) == body


def test_append_with_tag_node_utf8_and_meta_flag():
    env = append_envelope(b'"h\xc3\xa9"', b"{}")
    data = encode_frame(T.APPEND, topic_id=9, seq=1, ts=5, data=env, tag="tág✓".encode(),
                        node="nöde-1".encode(), flags=FLAG_META)
    frame = decode(data)
    assert frame.tag == "tág✓" and frame.node == "nöde-1"
    assert frame.flags == FLAG_META | FLAG_TAG | FLAG_NODE
    assert frame.data == b'{"d":"h\xc3\xa9","m":{}}'
    assert payload_bytes(len(frame.data), frame.flags) == len(b'"h\xc3\xa9"') + 2
    no_meta = decode(encode_frame(T.APPEND, data=append_envelope(b"[1]", None)))
    assert no_meta.data == b'{"d":[1]}' and payload_bytes(len(no_meta.data), 0) == 3


def test_tag_only_and_node_only_sections_do_not_bleed():
    only_tag = decode(encode_frame(T.APPEND, data=b"{}", tag=b"t"))
    only_node = decode(encode_frame(T.APPEND, data=b"{}", node=b"n"))
    assert (only_tag.tag, only_tag.node, only_tag.flags) == ("t", None, FLAG_TAG)
    assert (only_node.tag, only_node.node, only_node.flags) == (None, "n", FLAG_NODE)
    assert only_tag.data == only_node.data == b"{}"


def test_empty_data_is_the_minimum_frame():
    data = encode_frame(T.APPEND, topic_id=1, seq=1)
    assert len(data) == 4 + FRAME_LEN_MIN == 46
    frame = decode(data)
    assert frame is not None and frame.data == b"" and frame.size == 46


def test_consecutive_frames_decode_by_size():
    buf = bytearray()
    sizes = [encode(buf, T.APPEND, 0, 1, seq, 0, b'{"d":%d}' % seq) for seq in range(1, 6)]
    offset, seqs = 0, []
    while (frame := decode_at(buf, offset, len(buf))) is not None:
        seqs.append(frame.seq)
        offset += frame.size
    assert seqs == [1, 2, 3, 4, 5] and offset == sum(sizes) == len(buf)


def test_decode_respects_end_not_buffer_length():
    data = encode_frame(T.APPEND, data=b"{}") + bytes(100)
    assert decode_at(data, 0, 46 + 2 - 1) is None          # end cuts the frame
    assert decode_at(data, 0, 48) is not None


# --- corruption kinds of spec 1.3: each returns None and never raises ----------------------

GOOD = encode_frame(T.APPEND, topic_id=3, seq=9, ts=1, data=b'{"d":1}', tag=b"tg", node=b"nd")


@pytest.mark.parametrize("n", [0, 1, 3, 4, 45])
def test_fewer_bytes_than_a_minimal_frame(n):
    assert decode(GOOD[:n]) is None


@pytest.mark.parametrize("frame_len", [0, 1, 41])
def test_frame_len_below_minimum(frame_len):
    data = struct.pack("<I", frame_len) + GOOD[4:]
    assert decode(data) is None


def test_preallocated_zeros_end_the_log():
    assert decode(bytes(4096)) is None
    assert decode(GOOD + bytes(100), len(GOOD)) is None


@pytest.mark.parametrize("cut", [1, 8, len(GOOD) - HEADER_BYTES])
def test_overrun_past_the_end(cut):
    assert decode(GOOD[:-cut]) is None
    huge = struct.pack("<I", 0xFFFFFFFF) + GOOD[4:]
    assert decode(huge) is None


@pytest.mark.parametrize("pos", [4, 5, 6, 14, 22, 30, 32, 34, HEADER_BYTES, HEADER_BYTES + 2,
                                 HEADER_BYTES + 4, len(GOOD) - 9, len(GOOD) - 8, len(GOOD) - 1])
def test_checksum_catches_a_flip_in_every_region(pos):
    """type, flags, topic_id, seq, ts, lengths, node, tag, data and the checksum itself."""
    for bit in (0x01, 0x80):
        data = bytearray(GOOD)
        data[pos] ^= bit
        assert decode(bytes(data)) is None, (pos, bit)


@pytest.mark.parametrize("lens", [(2, 2, 8), (1, 2, 7), (3, 2, 7), (2, 0, 7), (0, 0, 0),
                                  (0xFFFF, 0xFFFF, 0xFFFFFFFF)])
def test_section_lengths_that_do_not_match_frame_len(lens):
    data = raw_frame(T.APPEND, b'{"d":1}', b"nd", b"tg", lens=lens)
    assert decode(data) is None
    assert decode(raw_frame(T.APPEND, b'{"d":1}', b"nd", b"tg")) is not None   # control


@pytest.mark.parametrize("where", ["node", "tag"])
@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"a\xed\xa0\x80b", b"\x80"])
def test_non_utf8_node_or_tag(where, bad):
    kwargs = {where: bad}
    assert decode(raw_frame(T.APPEND, b"{}", **kwargs)) is None


@pytest.mark.parametrize("ftype", [0, 20, 99, 255])
def test_unknown_type(ftype):
    assert decode(raw_frame(ftype, fb.encode_u64(1))) is None


BAD_BODIES = [
    (T.TOPIC_CREATE, b""),
    (T.TOPIC_CREATE, fb.encode_topic("t", b"{}")[:-1]),
    (T.TOPIC_CREATE, fb.encode_topic("t", b"{}") + b"\x00"),
    (T.TOPIC_CREATE, struct.pack("<I", 1) + b"\xff" + struct.pack("<I", 0)),
    (T.TOPIC_DELETE, struct.pack("<I", 1000) + b"abc"),
    (T.CONFIG_UPDATE, fb.encode_topic("t", b"") + b"x"),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER) + b"\x00"),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER)[:-1]),
    (T.ROUTER_CREATE, fb.encode_router_create(ROUTER).replace(b"\x01\x01", b"\x01\x07", 1)),
    (T.ROUTER_DELETE, fb.encode_router_delete("r") + b"\x00"),
    (T.ROUTER_DELETE, b"\x01\x00"),
    (T.DELETE, fb.encode_delete(fb.DeleteBody(1, None, (2, 3), 4)) + b"\x00"),
    (T.DELETE, fb.encode_delete(fb.DeleteBody(1, None, (2, 3), 4))[:-1]),
    (T.DELETE, b"\x00\x00" + struct.pack("<I", 0xFFFFFFFF) + b"\x00"),   # no huge allocation
    (T.DELETE, b"\x00\x01\x02" + fb._lp("x") + struct.pack("<I", 0) + b"\x00"),  # bad match op
    (T.EVICT_WATERMARK, bytes(23)),
    (T.EVICT_WATERMARK, bytes(25)),
    (T.CHECKPOINT_MARK, b""),
    (T.CHECKPOINT_MARK, bytes(9)),
    (T.HEAD_WATERMARK, bytes(7)),
    (T.HEAD_WATERMARK, bytes(16)),
    (T.LEASE, fb.encode_lease(fb.LeaseBody(6, 1, 1, 1, "n"))),            # unknown event
    (T.LEASE, fb.encode_lease(fb.LeaseBody(1, 1, 1, 1, "n")) + b"\x00"),
    (T.LEASE, bytes(10)),
    (T.IDEM_KEY, fb.encode_idem_key("k", 1)[:-1]),
    (T.IDEM_KEY, fb.encode_idem_key("k", 1) + b"\x00"),
]


@pytest.mark.parametrize("ftype,data", BAD_BODIES,
                         ids=[f"{t.name}-{i}" for i, (t, _) in enumerate(BAD_BODIES)])
def test_control_body_parse_failure_or_leftover_bytes(ftype, data):
    with pytest.raises((ValueError, struct.error, UnicodeDecodeError)):
        fb.decode_body(ftype, data)
    assert decode(encode_frame(ftype, data=data)) is None


def test_append_bodies_are_opaque():
    assert decode(encode_frame(T.APPEND, data=b"\xff not json")) is not None


# --- fuzz: never raises, never returns a frame with a wrong checksum ---------------------------

def _valid_frames(rng: random.Random) -> list[bytes]:
    out = []
    for ftype, data, _ in BODIES:
        out.append(encode_frame(ftype, topic_id=rng.getrandbits(64), seq=rng.getrandbits(64),
                                ts=rng.getrandbits(64), data=data,
                                tag=b"t" * rng.randrange(3), node=b"n" * rng.randrange(3)))
    return out


def _check(buf, offset: int = 0) -> bool:
    frame = decode_at(buf, offset, len(buf))
    if frame is None:
        return False
    assert frame.offset == offset and offset + frame.size <= len(buf)
    assert frame.size == 4 + struct.unpack_from("<I", buf, offset)[0]
    assert checksum_ok(buf, offset, frame.size)
    assert frame.type in set(FrameType)
    return True


def test_fuzz_random_buffers_never_raise():
    rng = random.Random(0xC0FFEE)
    for _ in range(3000):
        n = rng.choice([0, 3, 4, 45, 46, 47, 64, 200])
        buf = bytes(rng.getrandbits(8) for _ in range(n))
        if n >= 4 and rng.random() < 0.5:   # plausible length prefixes reach deeper checks
            buf = struct.pack("<I", rng.randrange(42, max(43, n + 8))) + buf[4:]
        assert not _check(buf)     # a random checksum never matches


def test_fuzz_mutated_frames_never_raise_nor_pass_a_bad_checksum():
    rng = random.Random(1234)
    frames = _valid_frames(rng)
    accepted = rejected = 0
    for _ in range(4000):
        buf = bytearray(rng.choice(frames))
        for _ in range(rng.randrange(1, 4)):
            op = rng.randrange(5)
            if op == 0 and buf:                          # flip bits
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            elif op == 1 and buf:                        # truncate
                del buf[rng.randrange(len(buf)):]
            elif op == 2:                                # trailing garbage (still decodes)
                buf += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 9)))
            elif op == 3 and len(buf) >= 4:              # rewrite the length prefix
                struct.pack_into("<I", buf, 0, rng.choice(
                    [0, 41, 42, len(buf) - 4, len(buf), rng.getrandbits(32)]))
            elif op == 4 and len(buf) > HEADER_BYTES:    # rewrite a section length
                struct.pack_into("<H", buf, rng.choice([30, 32]), rng.randrange(8))
        if _check(bytes(buf)):
            accepted += 1
        else:
            rejected += 1
    assert accepted > 100 and rejected > 1000   # both paths were exercised


def test_fuzz_checksum_valid_garbage_never_raises():
    """Frames whose checksum is right but whose sections and bodies are random."""
    rng = random.Random(99)
    for _ in range(3000):
        ftype = rng.choice(list(FrameType) + [0, 99])
        data = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 40)))
        node = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 3)))
        frame = decode(raw_frame(ftype, data, node=node))
        if frame is not None:
            assert ftype in set(FrameType)
            fb.decode_body(ftype, frame.data)            # accepted bodies really decode
