"""The stored record envelope: the body of an Append frame and of a segment record
(spec/storage.md 1.3, 1.4), and the only code that knows its shape.

    {"d":<data>}              the frame's flags lack FLAG_META
    {"d":<data>,"m":<meta>}   the frame's flags carry FLAG_META

<data> and <meta> are the JSON texts the writer was given, spliced in unchanged, so a reader
gets them back by slicing. The flag, not the bytes, says which form a record has.

Why the split needs no parse in the common case: in valid JSON the bytes `,"m":` occur only
as an object member named "m" that is not the object's first (inside a string `"` is
escaped, and a closing `"` is never followed by `m`). The envelope's own separator is one
such occurrence; when it is the only one it is the split point. Only data or meta holding a
nested object with a later "m" member makes the envelope parsed.
"""

from __future__ import annotations

from itertools import repeat

import orjson

from topics_actors.storage.frame_types import FLAG_META

_HEAD = b'{"d":'
_META_MARK = b',"m":'
_HEAD_BYTES = len(_HEAD)                       # 5
_MARK_BYTES = len(_META_MARK)                  # 5
PLAIN_OVERHEAD = _HEAD_BYTES + 1               # {"d": ... }           6
META_OVERHEAD = PLAIN_OVERHEAD + _MARK_BYTES   # {"d": ... ,"m": ... } 11
PLAIN_DATA = slice(_HEAD_BYTES, -1)            # envelope[PLAIN_DATA]: data, when no meta


def build(data: bytes, meta: bytes | None) -> bytes:
    """The envelope of a record; data and meta are valid JSON texts, spliced as given."""
    if meta is None:
        return _HEAD + data + b"}"
    return _HEAD + data + _META_MARK + meta + b"}"


def build_plain(datas: list[bytes]) -> list[bytes]:
    """[build(data, None) for data in datas], without a Python step per record."""
    return list(map(b"".join, zip(repeat(_HEAD), datas, repeat(b"}"))))


def meta_flag(meta: bytes | None) -> int:
    """The frame flag bits that go with the envelope `build(data, meta)`."""
    return 0 if meta is None else FLAG_META


def has_meta(flags: int) -> bool:
    return bool(flags & FLAG_META)


def meta_flag_of(with_meta: bool) -> int:
    """The flags bit of an envelope that has meta (has_meta's inverse)."""
    return FLAG_META if with_meta else 0


def payload_bytes(envelope_len: int, flags: int) -> int:
    """len(data) + len(meta), the API's byte accounting, from the envelope's length."""
    return envelope_len - (META_OVERHEAD if flags & FLAG_META else PLAIN_OVERHEAD)


def payloads_bytes(envelopes_len: int, count: int, with_meta: int) -> int:
    """The sum of payload_bytes() over `count` envelopes of `envelopes_len` bytes in all,
    `with_meta` of them with meta."""
    return envelopes_len - count * PLAIN_OVERHEAD - with_meta * (META_OVERHEAD - PLAIN_OVERHEAD)


def split(envelope, meta: bool) -> tuple[bytes, bytes | None]:
    """(data, meta) JSON texts of an envelope (bytes or a buffer); `meta` says whether it
    has meta (has_meta(flags), or the diff wire record's flag). Slices of the stored texts,
    except for an envelope with several `,"m":` (module docstring): that one is parsed and
    its parts re-encoded compactly, the same JSON values."""
    if not meta:
        return bytes(envelope[PLAIN_DATA]), None
    if type(envelope) is not bytes:
        envelope = bytes(envelope)
    at = envelope.find(_META_MARK)
    if at > 0 and envelope.find(_META_MARK, at + _MARK_BYTES) < 0:
        return envelope[_HEAD_BYTES:at], envelope[at + _MARK_BYTES:-1]
    body = orjson.loads(envelope)
    return orjson.dumps(body["d"]), orjson.dumps(body["m"]) if "m" in body else None


def data(envelope, meta: bool):
    """The data JSON text of an envelope: without meta a slice of the same type (a buffer
    stays a buffer, no copy), else split()'s first part."""
    if not meta:
        return envelope[PLAIN_DATA]
    return split(envelope, True)[0]
