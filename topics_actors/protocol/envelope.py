"""Envelope and codec: the only place where messages are encoded or decoded.

    envelope = msgpack array [version u8, kind str, corr u64, body map]

A request kind names a frozen dataclass registered with @message; replies are kind "reply"
(body = the result map) or "error" (body = {code, message, detail?}). Record payloads travel as
msgpack bin and are never re-parsed on the way. Decoding validates every field's type, so
handlers only see well-formed messages; a field of a closed set (an enum: _CLOSED_SETS)
must hold one of its values, and arrives as its member.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import msgpack

from topics_actors.config import ProcessRole, ProcessState
from topics_actors.errors import ProtocolError, TopicsError
from topics_actors.limits import MESSAGE_BYTES_MAX
from topics_actors.protocol.packer import pack
from topics_actors.topic_config import Acks

PROTOCOL_VERSION = 3
CORR_PREFIX_BYTES = 4096       # version, kind and corr come first: this many bytes hold them
REPLY = "reply"
ERROR = "error"

_REGISTRY: dict[str, type["Message"]] = {}

_CHECKS: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "bool": (bool,), "bytes": (bytes,),
    "list": (list,), "dict": (dict,), "float": (float, int),
}
# Closed sets a field may be annotated with: the wire carries the value's string.
_CLOSED_SETS = {cls.__name__: cls for cls in (Acks, ProcessRole, ProcessState)}


def _closed_checker(closed, optional: bool):
    members = {member.value: member for member in closed}

    def check(value) -> bool:
        return optional if value is None else type(value) is str and value in members
    return check


def _member_of(annotation: str):
    """For a field of a closed set, the function from its wire string to its member."""
    closed = [_CLOSED_SETS[p.strip()] for p in annotation.split("|")
              if p.strip() in _CLOSED_SETS]
    return closed[0] if closed else None


def _checker(annotation: str):
    """A predicate for a field annotation such as 'int', 'str | None', 'Acks | None' or
    'Any'."""
    if annotation == "Any":
        return lambda value: True
    parts = [p.strip() for p in annotation.split("|")]
    closed = [_CLOSED_SETS[p] for p in parts if p in _CLOSED_SETS]
    if closed:
        return _closed_checker(closed[0], "None" in parts)
    optional = "None" in parts
    types = tuple(t for p in parts if p != "None" for t in _CHECKS[p])
    no_bool = ("int" in parts or "float" in parts) and "bool" not in parts

    def check(value) -> bool:
        if value is None:
            return optional
        if no_bool and isinstance(value, bool):
            return False
        return isinstance(value, types)
    return check


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    KIND: ClassVar[str] = ""
    _FIELDS: ClassVar[tuple] = ()

    def body(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name, _, _, _ in self._FIELDS}

    @classmethod
    def from_body(cls, body: Any) -> "Message":
        if not isinstance(body, dict):
            raise ProtocolError(f"{cls.KIND}: body must be a map")
        values = {}
        for name, required, check, closed in cls._FIELDS:
            if name not in body:
                if required:
                    raise ProtocolError(f"{cls.KIND}: missing field {name!r}")
                continue
            value = body[name]
            if not check(value):
                raise ProtocolError(f"{cls.KIND}: field {name!r} has the wrong type"
                                    if closed is None else
                                    f"{cls.KIND}: field {name!r} must be one of "
                                    f"{', '.join(closed)}")
            values[name] = value if closed is None or value is None else closed(value)
        return cls(**values)


def _body_method(names: list[str]):
    """Message.body for one kind, written out (a dict display of its fields): what every
    request pays on its way out, so it skips the generic loop over _FIELDS."""
    if not all(name.isidentifier() for name in names):
        raise ValueError(f"field names must be identifiers: {names}")
    items = ", ".join(f"{name!r}: self.{name}" for name in names)
    scope: dict[str, Any] = {}
    exec(f"def body(self):\n    return {{{items}}}\n", scope)   # noqa: S102 - our own names
    return scope["body"]


def message(cls):
    """Register a request kind; its fields and their types come from the dataclass."""
    cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
    cls._FIELDS = tuple(
        (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
         _checker(str(f.type)), _member_of(str(f.type)))
        for f in dataclasses.fields(cls))
    cls.body = _body_method([f.name for f in dataclasses.fields(cls)])
    cls.body.__doc__ = Message.body.__doc__
    if cls.KIND in _REGISTRY:
        raise ValueError(f"duplicate message kind {cls.KIND}")
    _REGISTRY[cls.KIND] = cls
    return cls


def registered_kinds() -> dict[str, type[Message]]:
    return dict(_REGISTRY)


def _pack(kind: str, corr: int, body: Any) -> bytes:
    return pack([PROTOCOL_VERSION, kind, corr, body])


def encode(msg: Message, corr: int) -> bytes:
    """A request's envelope; ProtocolError (invalid_request) if it would be larger than any
    receiver takes: the sender learns it at once instead of from a refusal."""
    raw = _pack(msg.KIND, corr, msg.body())
    if len(raw) > MESSAGE_BYTES_MAX:
        raise ProtocolError(f"a {msg.KIND} of {len(raw)} bytes is larger than the limit of "
                            f"{MESSAGE_BYTES_MAX}", detail={"bytes": len(raw),
                                                            "max": MESSAGE_BYTES_MAX})
    return raw


def encode_reply(corr: int, body: dict[str, Any]) -> bytes:
    return _pack(REPLY, corr, body)


def encode_error(corr: int, error: TopicsError) -> bytes:
    return _pack(ERROR, corr, error.to_wire())


def encode_event(body: dict[str, Any]) -> bytes:
    """The payload of a supervisor event (PUB); the dotted event name travels as frame 0."""
    return _pack("event", 0, body)


def decode_event(raw: bytes) -> dict[str, Any]:
    body = _unpack(raw)[3]
    if not isinstance(body, dict):
        raise ProtocolError("event body must be a map")
    return body


def corr_of(raw: bytes) -> int:
    """The corr of an envelope read from its first bytes only (0 when they do not tell): how
    a message too large to decode still gets an answer its sender can match."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(raw[:CORR_PREFIX_BYTES])
    try:
        if unpacker.read_array_header() != 4:
            return 0
        unpacker.skip()
        unpacker.skip()
        corr = unpacker.unpack()
    except Exception:  # msgpack raises several unrelated types for a cut or bad prefix
        return 0
    return corr if type(corr) is int and corr >= 0 else 0


def with_corr(raw: bytes, corr: int) -> tuple[int, bytes]:
    """(the envelope's own corr, the same envelope carrying `corr` instead): the front
    relays a request or a reply under another corr without decoding its body again. Raises
    ProtocolError when the first bytes are not a version-2 envelope header."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(raw[:CORR_PREFIX_BYTES])
    try:
        size = unpacker.read_array_header()
        version, kind, old = unpacker.unpack(), unpacker.unpack(), unpacker.unpack()
    except Exception:  # msgpack raises several unrelated types for a cut or bad prefix
        raise ProtocolError("undecodable envelope header") from None
    if (size != 4 or version != PROTOCOL_VERSION or not isinstance(kind, str)
            or type(old) is not int or old < 0):
        raise ProtocolError("envelope must be [version, kind, corr, body]")
    head = pack([version, kind, corr])
    # a packed 3-array: replace its header byte (0x93) by a 4-array's (0x94)
    return old, b"\x94" + head[1:] + raw[unpacker.tell():]


def requests_of(frames: list[bytes]) -> list[bytes]:
    """The requests of a message as a ROUTER receives it ([identity, frame, ...]): its
    non-empty frames after the identity (an empty one is a REQ-style delimiter), or its
    last frame when there is none (an empty message, answered as a bad request)."""
    if len(frames) == 2:
        return frames[1:]
    return [frame for frame in frames[1:] if frame] or frames[-1:]


def _unpack(raw: bytes) -> list:
    if len(raw) > MESSAGE_BYTES_MAX:
        error = ProtocolError(f"message of {len(raw)} bytes is larger than the limit of "
                              f"{MESSAGE_BYTES_MAX}", detail={"bytes": len(raw),
                                                              "max": MESSAGE_BYTES_MAX})
        error.corr = corr_of(raw)
        raise error
    try:
        envelope = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"undecodable message: {type(exc).__name__}") from None
    if not isinstance(envelope, list) or len(envelope) != 4:
        raise ProtocolError("envelope must be [version, kind, corr, body]")
    return envelope


def decode(raw: bytes) -> tuple[int, Message]:
    """Decode a request. Raises ProtocolError whose `corr` attribute is set when known."""
    envelope = _unpack(raw)
    version, kind, corr, body = envelope
    if isinstance(corr, bool) or not isinstance(corr, int) or corr < 0:
        raise ProtocolError("envelope corr must be a non-negative integer")
    try:
        if version != PROTOCOL_VERSION:
            raise ProtocolError(f"unsupported protocol version {version!r}")
        cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ProtocolError(f"unknown message kind {kind!r}")
        return corr, cls.from_body(body)
    except ProtocolError as exc:
        exc.corr = corr
        raise


def decode_reply(raw: bytes) -> tuple[int, dict[str, Any]]:
    """Decode a reply; an error reply is raised as TopicsError carrying its code."""
    version, kind, corr, body = _unpack(raw)
    if kind == REPLY and isinstance(body, dict):
        return corr, body
    if kind == ERROR and isinstance(body, dict):
        error = TopicsError.from_wire(body)
        error.corr = corr
        raise error
    raise ProtocolError(f"unexpected reply kind {kind!r}")
