"""Validation of an append batch as it arrives on the wire (spec/api.md 5.5 limits).

A wire record is [data, tag?, node?, meta?]: data and meta are JSON bytes (msgpack bin),
tag and node strings. Validation happens before anything is staged, so a rejected batch
changes nothing.

Every `data` is parsed once, to prove it is JSON, except in a VouchedRecords batch: the
gateway parsed the HTTP body and wrote each data with orjson itself, so a second parse here
would only repeat its work. Limits (sizes, tag, node, meta) are checked for every batch.
"""

from __future__ import annotations

import orjson

from topics_actors import json_rules
from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.limits import (
    BATCH_RECORDS_MAX, META_BYTES_MAX, META_KEYS_MAX, NODE_BYTES_MAX, RECORD_BYTES_MAX,
    TAG_BYTES_MAX,
)
from topics_actors.record_envelope import build as build_envelope
from topics_actors.record_envelope import meta_flag


# A staged record is a plain tuple (cheaper than a named one on the hot path):
#   (envelope, tag, node, flags, payload_bytes)
# envelope = {"d":…} or {"d":…,"m":…}, the Append frame body; tag and node as UTF-8 bytes
# (b"" when absent); flags = FLAG_META or 0; payload_bytes = len(data) + len(meta), the
# API's byte accounting.
StagedRecord = tuple[bytes, bytes, bytes, int, int]
TAG = 1
PAYLOAD_BYTES = 4


class VouchedRecords(list):
    """The records of an Append whose `data` a trusted node process (the gateway) has
    already parsed and written as JSON itself, so staging does not parse it again.

    Only the shard's socket shell makes one, for an Append marked `prevalidated` that came
    off its node-internal ipc socket (shard/shard_server.py). msgpack never decodes into
    this type, so no wire peer can forge it."""
    __slots__ = ()


def _bytes(raw: object, what: str) -> bytes:
    if not isinstance(raw, bytes) or not raw:
        raise invalid(f"record {what} must be non-empty JSON bytes")
    return raw


def _json(raw: object, what: str) -> object:
    try:
        value = orjson.loads(_bytes(raw, what))
    except orjson.JSONDecodeError:
        raise invalid(f"record {what} is not valid JSON") from None
    json_rules.check_depth(raw, value, f"record {what}")
    return value


def _text(value: object, what: str, limit: int) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise invalid(f"record {what} must be a string")
    raw = value.encode("utf-8")
    if len(raw) > limit:
        raise invalid(f"record {what} is longer than {limit} bytes")
    return raw


def _checked_size(size: int) -> int:
    if size > RECORD_BYTES_MAX:
        raise TopicsError(f"record is larger than {RECORD_BYTES_MAX} bytes",
                          ErrorCode.RECORD_TOO_LARGE, {"bytes": size, "max": RECORD_BYTES_MAX})
    return size


_NONES = {1: [], 2: [None], 3: [None, None], 4: [None, None, None]}
DEPTH_CHECK_BYTES = 2 * json_rules.JSON_DEPTH_MAX   # shorter texts cannot be too deep


def validate_batch_node(node: object) -> bytes:
    return _text(node, "node", NODE_BYTES_MAX)


def stage_record(record: object, batch_node: bytes, vouched: bool = False) -> StagedRecord:
    if not isinstance(record, (list, tuple)) or not 1 <= len(record) <= 4:
        raise invalid("a record must be [data, tag?, node?, meta?]")
    data = record[0]
    if vouched:
        _bytes(data, "data")
    else:
        _json(data, "data")
    tag = _text(record[1], "tag", TAG_BYTES_MAX) if len(record) > 1 else b""
    node = _text(record[2], "node", NODE_BYTES_MAX) if len(record) > 2 else b""
    meta = record[3] if len(record) > 3 else None
    if meta is not None:
        if len(meta if isinstance(meta, bytes) else b"") > META_BYTES_MAX:
            raise invalid(f"record meta is longer than {META_BYTES_MAX} bytes")
        parsed = _json(meta, "meta")    # even when vouched: its key count is a shard limit
        if isinstance(parsed, dict) and len(parsed) > META_KEYS_MAX:
            raise invalid(f"record meta has more than {META_KEYS_MAX} keys")
    size = _checked_size(len(data) + (len(meta) if meta is not None else 0))
    return (build_envelope(data, meta), tag, node or batch_node, meta_flag(meta), size)


def check_batch_size(records: list) -> None:
    """A batch holds 1..BATCH_RECORDS_MAX records (spec/api.md 5.5)."""
    if not records:
        raise invalid("records must not be empty")
    if len(records) > BATCH_RECORDS_MAX:
        raise TopicsError(f"a batch holds at most {BATCH_RECORDS_MAX} records",
                          ErrorCode.BATCH_TOO_LARGE,
                          {"records": len(records), "max": BATCH_RECORDS_MAX})


def stage_batch(records: list, batch_node: object) -> list[StagedRecord]:
    """The staged records of a batch, or the first record's error; `records` as decoded
    from the wire, or VouchedRecords (whose data is not parsed again)."""
    check_batch_size(records)
    node = validate_batch_node(batch_node)
    vouched = type(records) is VouchedRecords
    staged, loads = [], orjson.loads
    for record in records:
        # Fast path: [data] or [data, None, None, None], the common shape of a record.
        if (type(record) is list and 0 < len(record) <= 4 and type(record[0]) is bytes
                and record[0] and record[1:] == _NONES[len(record)]):
            data = record[0]
            if not vouched:
                try:
                    value = loads(data)
                except orjson.JSONDecodeError:
                    raise invalid("record data is not valid JSON") from None
                if len(data) > DEPTH_CHECK_BYTES:
                    json_rules.check_depth(data, value, "record data")
            staged.append((build_envelope(data, None), b"", node, 0, _checked_size(len(data))))
        else:
            staged.append(stage_record(record, node, vouched))
    return staged
