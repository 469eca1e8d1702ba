"""Validation of an append batch as it arrives on the wire (spec/api.md 5.5 limits).

A wire record is [data, tag?, node?, meta?]: data and meta are JSON bytes (msgpack bin),
tag and node strings. A batch of plain records (data alone) may also come in the array
form: one bin holding a JSON array of the records' datas (docs/PROTOCOL.md `append`).
Validation happens before anything is staged, so a rejected batch changes nothing.

Every `data` is checked to be JSON, except in a vouched batch (VouchedRecords,
VouchedText): the gateway parsed the HTTP body and wrote each data with orjson itself, so a
second check here would only repeat its work. Limits (sizes, tag, node, meta) are checked
for every batch.

A batch of plain records (the array form, or a list of PLAIN_BATCH_MIN or more records that
are all [data] or all [data, None, None, None]) is staged as one PlainBatch: its datas
checked in one call (msgspec reads the array's grammar and gives each element's bytes
without building a value; a list's datas are joined into an array for it, and each element
must be exactly one data, so `[1` and `2],3`, which join into two valid elements, are not
taken), their bytes joined, and where each ends kept in an array. What msgspec does not
check (UTF-8, numbers a double cannot hold) is looked for in the whole text at once, and
only texts in doubt are parsed one by one by orjson, the parser of every other path. Any
doubt about a list sends it down the record-by-record path, which names the first bad
record exactly as before.
"""

from __future__ import annotations

from array import array
from itertools import accumulate, chain, repeat
from operator import itemgetter, sub

import orjson

try:    # the one-call check of a batch's JSON; without it, each record is parsed alone
    import msgspec
    _RAW_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
except ImportError:             # pragma: no cover - msgspec ships wheels for our platforms
    msgspec = None
    _RAW_ARRAY = None

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


class VouchedText(bytes):
    """The array form of an Append marked `prevalidated` from the trusted socket (see
    VouchedRecords): its elements are found, not parsed again."""
    __slots__ = ()


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
# (measured with core_bench.py --staging, docs/BENCHMARKS_HISTORY.md "Issue 18").
PLAIN_BATCH_MIN = 10
PLAIN_VOUCHED_MIN = 20
_FIRST = itemgetter(0)
# What msgspec's grammar check leaves to orjson: a number beyond a double's range, which
# orjson refuses. Such a number has an exponent or at least 309 digits; texts that hold a
# digit followed by e/E (an exponent, or such letters in a string: then harmless) or a run
# of _DIGIT_RUN digits are parsed by orjson itself. The look is one translate and a find
# over the whole batch, a second find when a text is that long (re would take ten times as
# long).
_NUMBER_SHAPES = bytes(48 if c in b"0123456789" else 101 if c in b"eE" else 46
                       for c in range(256))      # digits -> "0", e/E -> "e", else "."
_DIGIT_RUN = b"0" * 300


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
    """Staged records that all have no tag and no meta and share one node, kept as one
    bytes object (`texts`, the datas back to back) and the array of where each ends
    (`ends`, u32), so neither staging nor the frame encoder makes an object per record:
    the batch is one AppendBatch frame (storage/batch_frame.py). Code that reads staged
    records one by one sees the same StagedRecord tuples as from any staged list (len,
    iteration, indexing, ==)."""
    __slots__ = ("texts", "ends", "node")

    def __init__(self, texts: bytes, ends: array, node: bytes):
        self.texts, self.ends, self.node = texts, ends, node

    def __len__(self) -> int:
        return len(self.ends)

    @property
    def sizes(self) -> list[int]:
        """Each record's payload bytes (its data's length)."""
        ends = self.ends
        return list(map(sub, ends, chain((0,), ends)))

    def datas(self) -> list[bytes]:
        texts = self.texts
        return [texts[a:b] for a, b in zip(chain((0,), self.ends), self.ends)]

    def __iter__(self):
        return zip(build_plain(self.datas()), repeat(b""), repeat(self.node), repeat(0),
                   self.sizes)

    def __getitem__(self, index):
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, PlainBatch)) else False

    __hash__ = None


def payload_total(records) -> int:
    """len(data) + len(meta) over staged records (the API's byte accounting)."""
    if type(records) is PlainBatch:
        return records.ends[-1]
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


def _raw_elements(text: bytes) -> list | None:
    """The elements of the JSON array `text` as raw spans (no value built), or None when
    msgspec is not installed or finds `text` is not a JSON array. Its check is of the
    grammar only (no UTF-8, no number range): _sound() adds what orjson checks besides."""
    if _RAW_ARRAY is None:
        return None
    try:
        return _RAW_ARRAY.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None


def _sound(texts: bytes, longest: int) -> bool:
    """Whether texts the grammar check passed are surely JSON orjson reads, within the
    depth limit: UTF-8, no number that might not fit a double, none long enough to be
    too deep. False means: look at each by itself."""
    if not texts.isascii():
        try:
            texts.decode()
        except UnicodeDecodeError:
            return False
    if longest > DEPTH_CHECK_BYTES:
        return False
    shapes = texts.translate(_NUMBER_SHAPES)
    return shapes.find(b"0e") < 0 and (longest < len(_DIGIT_RUN)
                                       or shapes.find(_DIGIT_RUN) < 0)


def _joined_elements(datas: list[bytes], sizes: list[int]) -> list | None:
    """The raw elements of the datas joined into one array, when each element is exactly
    one data (so every data is one JSON value); None otherwise. Joined, `[1` and `2],3`
    make two valid elements, but not of the records' lengths."""
    raws = _raw_elements(b"[" + b",".join(datas) + b"]")
    if raws is None or len(raws) != len(sizes) or list(map(len, raws)) != sizes:
        return None
    return raws


def _checked_each(datas, sizes: list[int]) -> None:
    """Parse the datas the quick check left in doubt, one by one: the first bad one
    raises as the record-by-record path does (not JSON, too deep)."""
    for data, size in zip(datas, sizes):
        data = bytes(data)
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise invalid("record data is not valid JSON") from None
        if size > DEPTH_CHECK_BYTES:
            json_rules.check_depth(data, value, "record data")


def _plain_batch(texts: bytes, sizes: list[int], node: bytes) -> PlainBatch:
    return PlainBatch(texts, array("I", accumulate(sizes)), node)


def _stage_plain(datas: list[bytes], sizes: list[int], node: bytes,
                 vouched: bool) -> PlainBatch | None:
    """The staged records of plain datas, or None when any record breaks a rule or cannot
    be checked in one step (then the record-by-record path finds and names it)."""
    longest = max(sizes)
    if longest > RECORD_BYTES_MAX:
        return None
    texts = b"".join(datas)
    if not vouched and (_joined_elements(datas, sizes) is None or not _sound(texts, longest)):
        try:
            _checked_each(datas, sizes)
        except TopicsError:
            return None
    return _plain_batch(texts, sizes, node)


def _stage_array(text: bytes, node: bytes, vouched: bool) -> PlainBatch | list[StagedRecord]:
    """The staged records of an array-form batch: `text` is a JSON array whose elements are
    the records' datas (plain records, docs/PROTOCOL.md `append`). A compact array of two
    or more is staged as it is, each data's bytes kept (one AppendBatch frame); a lone
    record as any other; any other array (or no msgspec) is parsed and its elements
    written again by orjson."""
    raws = _raw_elements(text)
    if raws and len(raws) == 1:     # one record: an Append frame of its own, as ever
        return _stage_each([[bytes(raws[0])]], node, vouched)
    if raws:
        sizes = list(map(len, raws))
        if sum(sizes) + len(sizes) + 1 == len(text):   # compact: nothing between elements
            check_batch_size(raws)
            longest = max(sizes)
            if longest > RECORD_BYTES_MAX:
                _checked_size(longest)
            texts = b"".join(raws)
            if not vouched and not _sound(texts, longest):
                _checked_each(raws, sizes)
            return _plain_batch(texts, sizes, node)
    try:
        values = orjson.loads(bytes(text))
    except orjson.JSONDecodeError as error:
        raise invalid(f"records is not valid JSON (an array of the records' data): "
                      f"{error}") from None
    if type(values) is not list:
        raise invalid("records must be a JSON array of the records' data")
    check_batch_size(values)
    datas = [[json_rules.dumps(value, "record data")] for value in values]
    return _stage_records(VouchedRecords(datas), node)


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


def _stage_records(records: list, node: bytes) -> list[StagedRecord] | PlainBatch:
    vouched = type(records) is VouchedRecords
    if len(records) >= (PLAIN_VOUCHED_MIN if vouched else PLAIN_BATCH_MIN):
        plain = _plain_datas(records)
        if plain is not None:
            staged = _stage_plain(*plain, node, vouched)
            if staged is not None:
                return staged
    return _stage_each(records, node, vouched)


def stage_batch(records: list | bytes, batch_node: object) -> list[StagedRecord] | PlainBatch:
    """The staged records of a batch, or the first record's error; `records` as decoded
    from the wire (a list of records, or the array form: bytes of a JSON array of plain
    records' datas), or VouchedRecords or VouchedText (whose data is not parsed again)."""
    node = validate_batch_node(batch_node)
    if type(records) is bytes:
        return _stage_array(records, node, False)
    if type(records) is VouchedText:
        return _stage_array(records, node, True)
    check_batch_size(records)
    return _stage_records(records, node)
