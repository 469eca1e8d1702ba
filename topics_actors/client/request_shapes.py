"""What both clients share: building requests and shaping replies into API-style dicts."""

from __future__ import annotations

import base64
from operator import itemgetter
from typing import Any

import orjson

from topics_actors import json_rules
from topics_actors.errors import invalid
from topics_actors.limits import LIST_PAGE_SIZE_DEFAULT, LIST_PAGE_SIZE_MAX, clamp
from topics_actors.protocol.messages import Append, Diff, ListTopics
from topics_actors.record_envelope import split
from topics_actors.topic_pages import merged_topics

_MISSING = object()
_DATA = itemgetter("data")


def wire_record(record: dict) -> list:
    """{"data", "tag"?, "node"?, "meta"?} -> [data JSON bytes, tag, node, meta JSON bytes],
    or [data JSON bytes] alone when the others are absent: the shard reads both the same
    way, and the short form is what the gateway sends (record_batch.stage_batch)."""
    if not isinstance(record, dict) or "data" not in record:
        raise invalid("each record must be a dict with a 'data' field")
    data = json_rules.dumps(record["data"], "record data")
    tag, node, meta = record.get("tag"), record.get("node"), record.get("meta")
    if tag is None and node is None and meta is None:
        return [data]
    return [data, tag, node, None if meta is None else json_rules.dumps(meta, "record meta")]


def wire_records(records: list) -> list:
    """wire_record of each record. A batch of records that hold `data` alone (the common
    case) is written by one comprehension; any doubt (another shape, a value orjson refuses)
    goes record by record, which raises the first bad record's error."""
    dumps = orjson.dumps
    try:
        if type(records) is list and all([type(r) is dict and len(r) == 1 for r in records]):
            return [[dumps(r["data"])] for r in records]
    except (KeyError, TypeError):
        pass
    return [wire_record(r) for r in records]


def array_form(records: list) -> bytes | None:
    """The array form of an append's records (one JSON text of their datas, written by one
    orjson call: docs/PROTOCOL.md 6.1) when every record is a dict holding `data` alone;
    None for any other batch, and for a value orjson refuses (the record-by-record path
    then names the first bad record)."""
    try:
        if (type(records) is list and records
                and list(map(type, records)).count(dict) == len(records)
                and list(map(len, records)).count(1) == len(records)):
            return orjson.dumps(list(map(_DATA, records)))
    except (KeyError, TypeError):
        pass
    return None


def wire_batch(records: list) -> list | bytes:
    """The records of an append as the wire carries them: the array form when it applies,
    else wire_records."""
    text = array_form(records)
    return text if text is not None else wire_records(records)


def append_request(topic: str, records: list, session_key: str, *, node: str | None = None,
                   idempotency_key: str | None = None, create: bool | None = None,
                   config: dict | None = None, return_seqs: bool = True,
                   acks: str | None = None) -> Append:
    """The Append of a caller's append. It never asks the shard for `seqs` (they are
    first_seq..last_seq, which with_seqs writes out here, not on the wire)."""
    return Append(topic, wire_batch(records), node,
                  idempotency_key or session_key, create, config, False, acks=acks)


def with_seqs(reply: dict, options: dict) -> dict:
    """An append's reply with `seqs` when the caller's options ask for them (the default)."""
    if options.get("return_seqs", True) and "seqs" not in reply:
        reply["seqs"] = list(range(reply["first_seq"], reply["last_seq"] + 1))
    return reply


def diff_request(topic: str, from_seq: int, limit: int, node, include_tags: bool,
                 include_meta: bool, wait_ms: int, max_batch_bytes: int) -> Diff:
    return Diff(topic, from_seq, limit, node, include_tags, include_meta, wait_ms,
                max_batch_bytes)


def api_record(wire: list, include_meta: bool) -> dict:
    seq, ts, envelope, tag, node, has_meta = wire
    data, meta = split(envelope, has_meta)
    out: dict[str, Any] = {"$seq": seq, "$ts": ts}
    if node is not None:
        out["$node"] = node
    if tag is not None:
        out["$tag"] = tag
    out["data"] = orjson.loads(data)
    if include_meta and meta is not None:
        out["meta"] = orjson.loads(meta)
    return out


def shape_diff(reply: dict, include_meta: bool) -> dict:
    reply["records"] = [api_record(r, include_meta) for r in reply["records"]]
    reply.setdefault("performance", {})["records_scanned"] = reply.pop("records_scanned", 0)
    return reply


def encode_cursor(after: str) -> str:
    return base64.b64encode(orjson.dumps({"after": after})).decode()


def decode_cursor(cursor: str | None) -> str:
    if not cursor:
        return ""
    try:
        after = orjson.loads(base64.b64decode(cursor, validate=True))["after"]
    except (ValueError, KeyError, TypeError):
        raise invalid("cursor is not valid") from None
    if not isinstance(after, str):
        raise invalid("cursor is not valid")
    return after


def list_request(prefix: str, page_size: int | None, cursor: str | None,
                 touch: bool) -> tuple[ListTopics, int]:
    size = clamp(page_size or LIST_PAGE_SIZE_DEFAULT, 1, LIST_PAGE_SIZE_MAX)
    return ListTopics(prefix, decode_cursor(cursor), size, touch), size


def merge_pages(pages: list[dict], page_size: int) -> dict:
    """Merge per-shard pages (each sorted by name) into one page of the whole node."""
    page, more = merged_topics(pages, page_size)
    result: dict[str, Any] = {"topics": page}
    if more and page:
        result["next_cursor"] = encode_cursor(page[-1]["topic"])
    return result


def shape_claim(reply: dict) -> dict:
    """A claim reply with its jobs as API dicts ({"$seq", "lease_id", "deadline", "$ts",
    "$tag"?, "deliveries", "data", "meta"?}), as the HTTP API renders them."""
    jobs = []
    for seq, lease_id, deadline, ts, envelope, tag, deliveries, has_meta in reply["claimed"]:
        data, meta = split(envelope, has_meta)
        job: dict[str, Any] = {"$seq": seq, "lease_id": lease_id, "deadline": deadline,
                               "$ts": ts}
        if tag is not None:
            job["$tag"] = tag
        job["deliveries"] = deliveries
        job["data"] = orjson.loads(data)
        if meta is not None:
            job["meta"] = orjson.loads(meta)
        jobs.append(job)
    reply["claimed"] = jobs
    return reply
