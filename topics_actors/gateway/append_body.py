"""An HTTP append body (spec/api.md 5.5) checked and turned into the shard's Append.

Checked here, in the order of the spec: records present (400), at most 10000
(batch_too_large), idempotency key length (400), then each record's shape. Byte limits of
tag, node and meta and `record_too_large` are the shard's (record_batch.py), which sees the
same bytes. Each `data` and `meta` is serialized once to compact JSON, the bytes the shard
stores and the byte accounting counts; the datas of a batch of plain records (data alone)
by one call, as the array form of docs/PROTOCOL.md 6.1.

Those bytes are JSON by construction (orjson wrote them from the parsed body), so the Append
is marked `prevalidated` and the shard does not parse each `data` a second time. This is
the trust boundary: the shard honours the mark only on its node-internal ipc socket.
"""

from __future__ import annotations

import dataclasses

import orjson

from topics_actors import json_rules
from topics_actors.client.request_shapes import array_form
from topics_actors.errors import invalid
from topics_actors.gateway.request_body import field_bool, field_str
from topics_actors.limits import IDEMPOTENCY_KEY_BYTES_MAX
from topics_actors.protocol.messages import Append
from topics_actors.record_batch import check_batch_size
from topics_actors.topic_config import Acks, parse_config

ACKS = frozenset(Acks)          # the values an append's `acks` may take (strings equal them)

RECORD_OVERHEAD_BYTES = 16    # msgpack framing of one wire record, at most


@dataclasses.dataclass(frozen=True, slots=True)
class AppendPlan:
    message: Append
    may_create: bool          # an absent topic would be created by this append
    wire_bytes: int           # data, meta, tag and node bytes, plus RECORD_OVERHEAD_BYTES each
    count: int                # records
    batchable: bool = False   # may share a request with others (no client key, no config)


def _records(body: dict) -> list:
    records = body.get("records")
    if records is None:
        raise invalid("field 'records' is required")
    if not isinstance(records, list):
        raise invalid("field 'records' must be a list of records")
    check_batch_size(records)
    return records


def _key(body: dict, header_key: str | None) -> str | None:
    key = field_str(body, "idempotency_key")
    if key is None:
        key = header_key
    if key is not None and len(key.encode("utf-8", "surrogatepass")) > IDEMPOTENCY_KEY_BYTES_MAX:
        raise invalid(f"idempotency key is longer than {IDEMPOTENCY_KEY_BYTES_MAX} bytes")
    return key


def wire_records(records: list) -> tuple[list | bytes, int]:
    """The batch in the array form (docs/PROTOCOL.md 6.1) when every record holds `data`
    alone, else [[data, tag?, node?, meta?], ...] with JSON bytes; and the batch's wire
    bytes (data, meta, tag and node, plus RECORD_OVERHEAD_BYTES a record)."""
    text = array_form(records)
    if text is not None:
        return text, len(text) + RECORD_OVERHEAD_BYTES * len(records)
    try:
        return _wire_records(records)
    except TypeError as error:   # orjson refused a value (too deep, an integer too large)
        raise json_rules.unwritable("a record's data or meta", error) from None


def _wire_records(records: list) -> tuple[list, int]:
    dumps = orjson.dumps
    wire, total = [], 0
    for record in records:
        if type(record) is not dict or "data" not in record:
            raise invalid("each record must be an object with a 'data' field")
        data = dumps(record["data"])
        total += len(data)
        if len(record) == 1:
            wire.append([data])
            continue
        tag, node, meta = record.get("tag"), record.get("node"), record.get("meta")
        if (tag is not None and type(tag) is not str) or (
                node is not None and type(node) is not str):
            raise invalid("record 'tag' and 'node' must be strings")
        meta_raw = None if meta is None else dumps(meta)
        total += len(meta_raw) if meta_raw is not None else 0
        total += _utf8_len(tag) + _utf8_len(node)
        wire.append([data, tag, node, meta_raw])
    return wire, total + RECORD_OVERHEAD_BYTES * len(wire)


def _utf8_len(text: str | None) -> int:
    return 0 if text is None else len(text.encode("utf-8", "surrogatepass"))


def parse_append(topic: str, body: dict, header_key: str | None, return_seqs: bool,
                 fallback_key: str) -> AppendPlan:
    """The Append for `body`; `fallback_key` makes a gateway retry safe when the client
    sent no idempotency key."""
    records = _records(body)
    key = _key(body, header_key)
    node = field_str(body, "node")
    create = field_bool(body, "create", None)
    config = body.get("config")
    parsed = parse_config(config, topic) if config is not None else None
    field_bool(body, "disable_backpressure", None)     # accepted, no effect
    wire, size = wire_records(records)
    may_create = create if create is not None else (
        parsed.auto_create if parsed is not None else True)
    acks = field_str(body, "acks")
    if acks is not None and acks not in ACKS:
        raise invalid(f"field 'acks' must be one of {', '.join(Acks)}")
    message = Append(topic, wire, node, key or fallback_key, create, config, return_seqs,
                     prevalidated=True, acks=acks)
    return AppendPlan(message, may_create, size, len(records), key is None and config is None)
