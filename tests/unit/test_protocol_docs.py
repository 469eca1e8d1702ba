"""The wire protocol against its document and its codec.

Goal: every message kind the code registers is documented in docs/PROTOCOL.md under a
heading naming the kind, with every field; every kind survives encode -> decode; and decode
turns every kind of bad input into ProtocolError (invalid_request), carrying the request's
`corr` whenever the envelope itself was readable.

Method: sample values are derived from each dataclass field's annotation, so a new kind or
field is covered without editing this file. No sockets, no processes.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import msgpack
import pytest

from topics_actors.errors import ErrorCode, ProtocolError, TopicsError
from topics_actors.limits import MESSAGE_BYTES_MAX
from topics_actors.protocol import control, messages  # noqa: F401  (register the kinds)
from topics_actors.protocol.envelope import (
    PROTOCOL_VERSION, corr_of, decode, decode_event, decode_reply, encode, encode_error,
    encode_event, encode_reply, registered_kinds,
)
from topics_actors.protocol.messages import Append

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
KINDS = registered_kinds()
V = PROTOCOL_VERSION
KIND_NAMES = sorted(KINDS)

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


# --- helpers -------------------------------------------------------------------------------

def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) for every heading; a body runs to the next heading of the same or a
    higher level, so sub-headings belong to their parent's body."""
    lines = text.splitlines()
    heads = [(i, len(m.group(1)), m.group(2)) for i, line in enumerate(lines)
             if (m := _HEADING.match(line))]
    out = []
    for n, (start, level, title) in enumerate(heads):
        end = next((i for i, lv, _ in heads[n + 1:] if lv <= level), len(lines))
        out.append((title, "\n".join(lines[start + 1:end])))
    return out


def _kind_section(kind: str) -> str:
    bodies = [body for title, body in _sections(DOC.read_text(encoding="utf-8"))
              if f"`{kind}`" in title]
    assert bodies, f"docs/PROTOCOL.md has no heading containing `{kind}`"
    assert len(bodies) == 1, f"docs/PROTOCOL.md has several headings for `{kind}`"
    return bodies[0]


_SAMPLES = {
    "str": "sample-7", "int": 7, "bool": True, "bytes": b"\x00\xffbin",
    "list": [[b'{"a":1}', "tag", "node", b'{"k":"v"}'], [b"2"]],
    "dict": {"durability": "fsync", "ttl_ms": 1000}, "float": 0.25, "Any": ["n1", "n2"],
    # closed sets (protocol/envelope.py _CLOSED_SETS): a value that is not the default
    "Acks": "leader", "ProcessRole": "gateway", "ProcessState": "replaying",
}

# A value of the wrong type for each annotation part; bool is wrong wherever int is asked.
_WRONG = {"str": 5, "int": True, "bool": 1, "bytes": "text", "list": {"a": 1},
          "dict": [1, 2], "float": "0.5",
          "Acks": "most", "ProcessRole": "janitor", "ProcessState": "sleeping"}


def _parts(field: dataclasses.Field) -> list[str]:
    return [p.strip() for p in str(field.type).split("|")]


def _sample(field: dataclasses.Field):
    return _SAMPLES[next(p for p in _parts(field) if p != "None")]


def _full(cls):
    """An instance with every field set to a non-default sample value."""
    return cls(**{f.name: _sample(f) for f in dataclasses.fields(cls)})


def _minimal_body(cls) -> dict:
    return {f.name: _sample(f) for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _raw(version, kind, corr, body) -> bytes:
    return msgpack.packb([version, kind, corr, body], use_bin_type=True)


def _rejects(raw: bytes, corr: int | None) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode(raw)
    error = caught.value
    assert error.code is ErrorCode.INVALID_REQUEST
    assert error.to_wire()["code"] == "invalid_request"
    assert getattr(error, "corr", None) == corr
    return error


# --- (a) documentation ---------------------------------------------------------------------

def test_the_registry_holds_the_known_kinds():
    assert {"append", "diff", "put_topic", "get_topic", "list_topics", "delete_topic",
            "status", "hello", "heartbeat"} <= set(KINDS)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_kind_and_field_is_documented(kind):
    section = _kind_section(kind)
    missing = [f.name for f in dataclasses.fields(KINDS[kind]) if f"`{f.name}`" not in section]
    assert not missing, f"section `{kind}` of docs/PROTOCOL.md lacks fields {missing}"


def test_envelope_kinds_and_error_codes_are_documented():
    text = DOC.read_text(encoding="utf-8")
    for kind in ("reply", "error", "event"):
        _kind_section(kind)
    missing = [code.wire for code in ErrorCode if f"`{code.wire}`" not in text]
    assert not missing, f"docs/PROTOCOL.md lacks error codes {missing}"
    assert f"version {PROTOCOL_VERSION}" in text.lower()


# --- (b) round trips -----------------------------------------------------------------------

@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_kind_round_trips_with_samples(kind):
    cls = KINDS[kind]
    msg = _full(cls)
    corr, back = decode(encode(msg, 2**64 - 1))
    assert corr == 2**64 - 1
    assert type(back) is cls and back == msg


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_kind_round_trips_with_defaults(kind):
    cls = KINDS[kind]
    msg = cls(**_minimal_body(cls))
    assert decode(encode(msg, 0)) == (0, msg)
    # A body holding only the required fields decodes to the same message.
    assert decode(_raw(PROTOCOL_VERSION, kind, 3, _minimal_body(cls))) == (3, msg)


def test_payloads_stay_bytes():
    msg = messages.Append("t", [[b'{"x":1}', None, None, b"[1]"]])
    _, back = decode(encode(msg, 1))
    assert back.records[0][0] == b'{"x":1}' and back.records[0][3] == b"[1]"


def test_unknown_fields_are_ignored():
    body = dict(_minimal_body(messages.GetTopic), touch=False, later_field=1)
    assert decode(_raw(PROTOCOL_VERSION, "get_topic", 4, body)) == (
        4, messages.GetTopic("sample-7", False))


def test_replies_errors_and_events_round_trip():
    assert decode_reply(encode_reply(9, {"head_seq": 3, "data": b"{}"})) == (
        9, {"head_seq": 3, "data": b"{}"})
    error = TopicsError("slow down", ErrorCode.THROTTLED, {"retry_after_ms": 1000})
    with pytest.raises(TopicsError) as caught:
        decode_reply(encode_error(11, error))
    assert caught.value.code is ErrorCode.THROTTLED and caught.value.corr == 11
    assert caught.value.detail == {"retry_after_ms": 1000} and caught.value.retryable
    assert decode_event(encode_event({"role": "shard", "index": 1})) == {
        "role": "shard", "index": 1}


# --- (c) rejection -------------------------------------------------------------------------

def test_wrong_version_is_rejected_with_corr():
    body = _minimal_body(messages.Diff)
    _rejects(_raw(PROTOCOL_VERSION + 1, "diff", 21, body), corr=21)
    _rejects(_raw(0, "diff", 22, body), corr=22)
    _rejects(_raw("1", "diff", 23, body), corr=23)


def test_unknown_kind_is_rejected_with_corr():
    _rejects(_raw(PROTOCOL_VERSION, "nope", 31, {}), corr=31)
    _rejects(_raw(PROTOCOL_VERSION, "reply", 32, {}), corr=32)
    _rejects(_raw(PROTOCOL_VERSION, 7, 33, {}), corr=33)


def _wrong_type_cases():
    for kind in KIND_NAMES:
        cls = KINDS[kind]
        for field in dataclasses.fields(cls):
            parts = _parts(field)
            for part in parts:
                wrong = _WRONG.get(part)
                if wrong is None or any(_accepts(p, wrong) for p in parts):
                    continue
                yield pytest.param(kind, field.name, wrong, id=f"{kind}.{field.name}={wrong!r}")


def _accepts(part: str, value) -> bool:
    if part == "None":
        return value is None
    if part == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if part in ("Acks", "ProcessRole", "ProcessState"):
        return False          # the wrong samples are strings outside each set
    return part == "Any" or type(value) is {"str": str, "int": int, "bool": bool, "bytes": bytes,
                                            "list": list, "dict": dict}[part]


@pytest.mark.parametrize("kind,name,wrong", list(_wrong_type_cases()))
def test_wrong_field_types_are_rejected_with_corr(kind, name, wrong):
    body = dict(_minimal_body(KINDS[kind]), **{name: wrong})
    error = _rejects(_raw(PROTOCOL_VERSION, kind, 41, body), corr=41)
    assert name in error.message


@pytest.mark.parametrize("kind,field", [
    ("diff", "from_seq"), ("diff", "limit"), ("diff", "wait_ms"), ("list_topics", "limit"),
    ("hello", "index"), ("hello", "pid"), ("heartbeat", "pid")])
def test_bool_is_not_an_int(kind, field):
    for value in (True, False):
        body = dict(_minimal_body(KINDS[kind]), **{field: value})
        _rejects(_raw(PROTOCOL_VERSION, kind, 42, body), corr=42)


def test_null_is_rejected_where_not_optional():
    body = dict(_minimal_body(messages.Append), topic=None)
    _rejects(_raw(PROTOCOL_VERSION, "append", 43, body), corr=43)
    body = dict(_minimal_body(messages.Diff), include_meta=None)
    _rejects(_raw(PROTOCOL_VERSION, "diff", 44, body), corr=44)


def _required_fields():
    for kind in KIND_NAMES:
        for name in _minimal_body(KINDS[kind]):
            yield pytest.param(kind, name, id=f"{kind}.{name}")


@pytest.mark.parametrize("kind,name", list(_required_fields()))
def test_missing_required_fields_are_rejected_with_corr(kind, name):
    body = _minimal_body(KINDS[kind])
    del body[name]
    error = _rejects(_raw(PROTOCOL_VERSION, kind, 51, body), corr=51)
    assert name in error.message


@pytest.mark.parametrize("body", [None, [], ["topic", "t"], "topic", 5, b"\x80"])
def test_non_map_body_is_rejected_with_corr(body):
    _rejects(_raw(PROTOCOL_VERSION, "get_topic", 61, body), corr=61)
    _rejects(_raw(PROTOCOL_VERSION, "status", 62, body), corr=62)


@pytest.mark.parametrize("raw", [
    b"", b"\xc1", b"\xc1garbage", b"\x94\x01", b"\xff" * 64,
    msgpack.packb({"version": 1}), msgpack.packb([V, "status", 1]),
    msgpack.packb([V, "status", 1, {}, "extra"]), msgpack.packb("status"),
    msgpack.packb([V, "status", -1, {}]), msgpack.packb([V, "status", True, {}]),
    msgpack.packb([V, "status", "7", {}]), msgpack.packb([V, "status", None, {}]),
    msgpack.packb([V, "get_topic", 1, {1: "t"}]),
], ids=lambda raw: raw[:12].hex() or "empty")
def test_unreadable_envelopes_are_rejected_without_corr(raw):
    _rejects(raw, corr=None)


def test_oversize_messages_are_rejected_before_decoding_with_their_corr():
    record = [b"x" * (MESSAGE_BYTES_MAX // 2), None, None, None]
    raw = _raw(PROTOCOL_VERSION, "append", 71, {"topic": "t", "records": [record, record]})
    assert len(raw) > MESSAGE_BYTES_MAX
    error = _rejects(raw, corr=71)     # read from the first bytes: the sender can match it
    assert error.detail == {"bytes": len(raw), "max": MESSAGE_BYTES_MAX}
    assert corr_of(b"\x94\x02\xa6append") == 0 and corr_of(b"garbage") == 0


def test_an_oversize_request_is_refused_by_its_sender():
    record = [b"x" * (MESSAGE_BYTES_MAX // 2), None, None, None]
    with pytest.raises(ProtocolError, match="larger than the limit") as excinfo:
        encode(Append("t", [record, record]), 3)
    assert excinfo.value.code.wire == "invalid_request"


def test_largest_allowed_message_still_decodes():
    raw = _raw(PROTOCOL_VERSION, "append", 72, {"topic": "t", "records": [[b""]]})
    padding = MESSAGE_BYTES_MAX - len(raw) - 8
    raw = _raw(PROTOCOL_VERSION, "append", 72,
               {"topic": "t", "records": [[b"x" * padding]]})
    assert len(raw) <= MESSAGE_BYTES_MAX
    corr, msg = decode(raw)
    assert corr == 72 and len(msg.records[0][0]) == padding
