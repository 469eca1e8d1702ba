"""Validation of an append batch as it arrives on the wire (spec/api.md 5.5 limits).

A wire record is [data, tag?, node?, meta?]: data and meta are JSON bytes (msgpack bin),
tag and node strings. Validation happens before anything is staged, so a rejected batch
changes nothing.

Every `data` is parsed once, to prove it is JSON, except in a VouchedRecords batch: the
gateway parsed the HTTP body and wrote each data with orjson itself, so a second parse here
would only repeat its work. Limits (sizes, tag, node, meta) are checked for every batch.

A batch whose records all have the common shape ([data] or [data, None, None, None]) is
staged column by column (`_stage_plain`): its checks, envelopes and staged tuples come from
map and zip over the batch, and the one Python statement left per record is the parse of
its data, by itself. One parse of the datas joined into a JSON array would be faster, but
no element count or check on the parsed array can prove that the array's elements are the
records (`[1` and `2],3` join into a valid two-element array). Any doubt sends the batch
down the record-by-record path, which names the first bad record exactly as before.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import itemgetter, lt

import orjson

from topics_actors import json_rules
from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.limits import (
    BATCH_RECORDS_MAX, META_BYTES_MAX, META_KEYS_MAX, NODE_BYTES_MAX, RECORD_BYTES_MAX,
    TAG_BYTES_MAX,
)
from topics_actors.record_envelope import build as build_envelope
from topics_actors.record_envelope import build_plain, meta_flag


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
# Smaller batches are staged record by record: the column path costs about 2 us more per
# batch (each of its iterators costs 0.1-0.2 us to make here) and saves about 0.28 us per
# record parsed, 0.13 us per record vouched, so it pays from about 8 and 16 records
# (measured with core_bench.py --staging, docs/BENCHMARKS.md "Issue 18").
PLAIN_BATCH_MIN = 10
PLAIN_VOUCHED_MIN = 20
_FIRST = itemgetter(0)


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


class PlainBatch:
    """Staged records that all have no tag and no meta and share one node, kept as columns
    (`envelopes`, `sizes` = payload bytes, `node`) so neither staging nor the frame encoder
    makes a tuple per record; code that reads staged records one by one sees the same
    StagedRecord tuples as from any staged list (len, iteration, indexing, ==)."""
    __slots__ = ("envelopes", "sizes", "node")

    def __init__(self, envelopes: list[bytes], sizes: list[int], node: bytes):
        self.envelopes, self.sizes, self.node = envelopes, sizes, node

    def __len__(self) -> int:
        return len(self.envelopes)

    def __iter__(self):
        return zip(self.envelopes, repeat(b""), repeat(self.node), repeat(0), self.sizes)

    def __getitem__(self, index):
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, PlainBatch)) else False

    __hash__ = None


def payload_total(records) -> int:
    """len(data) + len(meta) over staged records (the API's byte accounting)."""
    if type(records) is PlainBatch:
        return sum(records.sizes)
    return sum(map(_PAYLOAD, records))


_PAYLOAD = itemgetter(PAYLOAD_BYTES)


def _plain_datas(records: list) -> tuple[list[bytes], list[int]] | None:
    """(datas, their sizes) of a batch whose records are all [data] or all
    [data, None, None, None], each data non-empty bytes; None for any other batch."""
    count = len(records)
    if list(map(type, records)).count(list) != count:
        return None
    shapes = list(map(len, records))
    if shapes.count(4) == count:    # three Nones each, and no data is None: checked next
        if list(map(list.count, records, repeat(None))).count(3) != count:
            return None
    elif shapes.count(1) != count:
        return None
    datas = list(map(_FIRST, records))
    if list(map(type, datas)).count(bytes) != count:
        return None
    sizes = list(map(len, datas))
    return (datas, sizes) if min(sizes) else None


def _stage_plain(datas: list[bytes], sizes: list[int], node: bytes,
                 vouched: bool) -> PlainBatch | None:
    """The staged records of plain datas, or None when any record breaks a rule (then the
    record-by-record path finds and names it)."""
    longest = max(sizes)
    if longest > RECORD_BYTES_MAX:
        return None
    if not vouched:
        loads = orjson.loads
        try:
            if longest > DEPTH_CHECK_BYTES:
                values = list(map(loads, datas))
                deep = compress(zip(datas, values), map(lt, repeat(DEPTH_CHECK_BYTES), sizes))
                for data, value in deep:
                    json_rules.check_depth(data, value, "record data")
            else:
                for data in datas:
                    loads(data)
        except (orjson.JSONDecodeError, TopicsError):
            return None
    return PlainBatch(build_plain(datas), sizes, node)


def _stage_each(records: list, node: bytes, vouched: bool) -> list[StagedRecord]:
    """The staged records of a batch, record by record: the first bad one raises."""
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


def stage_batch(records: list, batch_node: object) -> list[StagedRecord] | PlainBatch:
    """The staged records of a batch, or the first record's error; `records` as decoded
    from the wire, or VouchedRecords (whose data is not parsed again)."""
    check_batch_size(records)
    node = validate_batch_node(batch_node)
    vouched = type(records) is VouchedRecords
    if len(records) >= (PLAIN_VOUCHED_MIN if vouched else PLAIN_BATCH_MIN):
        plain = _plain_datas(records)
        if plain is not None:
            staged = _stage_plain(*plain, node, vouched)
            if staged is not None:
                return staged
    return _stage_each(records, node, vouched)
