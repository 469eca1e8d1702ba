"""The options of the `topics` data source, parsed and validated in one place.

Spark hands options over as a case-insensitive map of strings (spec/spark.md 2.3). They are
turned here into frozen, picklable dataclasses, so a bad option fails in the planning worker
with a clear message and nothing unpicklable ever sits on a reader or writer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Mapping

from topics_actors.client.shard_map import DEFAULT_ENDPOINT
from topics_actors.limits import BATCH_RECORDS_MAX, SCAN_LIMIT_MAX
from topics_actors.spark.offsets import EARLIEST, LATEST, OffsetSpec, is_seq

DEFAULT_URL = DEFAULT_ENDPOINT
SEQS_PER_PARTITION_DEFAULT = 100_000
PAGE_SIZE_DEFAULT = 10_000
PAGE_SIZE_MAX = SCAN_LIMIT_MAX           # a scan's limit
BATCH_SIZE_DEFAULT = 5_000
BATCH_SIZE_MAX = BATCH_RECORDS_MAX       # an append's records
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
# Idempotency keys of a topic the writer creates live this long (the server's default
# window is 2 minutes, too short for a query restarted the next morning).
IDEMPOTENCY_WINDOW_MS_DEFAULT = 7 * 24 * 3600 * 1000


class OptionError(ValueError):
    """An option is missing or malformed; the message names it."""


def _int(options: Mapping[str, str], name: str, default: int | None, low: int = 1,
         high: int | None = None) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise OptionError(f"option {name!r} must be in {bound}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {raw!r}")


def _url(options: Mapping[str, str]) -> str:
    url = options.get("url") or options.get("path") or DEFAULT_URL
    if "://" not in url:
        raise OptionError(f"option 'url' must be a ZeroMQ endpoint like {DEFAULT_URL}, "
                          f"got {url!r}")
    return url


def _topics(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = options.get("topics") or options.get("topic") or ""
    names = tuple(sorted({name.strip() for name in raw.split(",") if name.strip()}))
    if not names:
        raise OptionError("option 'topics' is required: a comma-separated list of topics")
    return names


def parse_offset_spec(raw: str | None, name: str, default: str) -> OffsetSpec:
    text = (raw or "").strip()
    if not text:
        return OffsetSpec(default)
    if text.lower() in (EARLIEST, LATEST):
        return OffsetSpec(text.lower())
    try:
        value = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name!r} must be earliest, latest or JSON "
                          f"{{\"topic\": seq}}, got {raw!r}") from None
    if isinstance(value, dict) and "topics" in value and "v" in value:
        value = value["topics"]               # a checkpointed offset is accepted as well
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and is_seq(v) for k, v in value.items()):
        raise OptionError(f"option {name!r}: JSON must map topic names to seqs, "
                          f"-1 = earliest, -2 = latest; got {raw!r}")
    seqs = tuple(sorted((k, v if v >= 0 else (EARLIEST if v == -1 else LATEST))
                        for k, v in value.items()))
    return OffsetSpec(default, seqs)



@dataclasses.dataclass(frozen=True)
class ReaderOptions:
    url: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    seqs_per_partition: int
    page_size: int
    max_records_per_trigger: int | None
    fail_on_data_loss: bool
    pushdown: bool
    request_timeout_ms: int
    data_dir: str | None          # set: read sealed segment files, not the server
    cold_dir: str | None


def reader_options(options: Mapping[str, str]) -> ReaderOptions:
    data_dir = options.get("datadir") or None
    cold_dir = options.get("colddir") or os.environ.get("TOPICS_COLD_DIR") or None
    return ReaderOptions(
        url=_url(options) if not data_dir else options.get("url") or "",
        topics=_topics(options),
        starting=parse_offset_spec(options.get("startingoffsets"), "startingOffsets",
                                   EARLIEST),
        ending=parse_offset_spec(options.get("endingoffsets"), "endingOffsets", LATEST),
        seqs_per_partition=_int(options, "seqsPerPartition", SEQS_PER_PARTITION_DEFAULT),
        page_size=_int(options, "pageSize", PAGE_SIZE_DEFAULT, 1, PAGE_SIZE_MAX),
        max_records_per_trigger=_int(options, "maxRecordsPerTrigger", None),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        pushdown=_bool(options, "pushdown", False),
        request_timeout_ms=_int(options, "requestTimeoutMs", REQUEST_TIMEOUT_MS_DEFAULT),
        data_dir=data_dir, cold_dir=cold_dir)


@dataclasses.dataclass(frozen=True)
class WriterOptions:
    url: str
    topic: str | None             # None: every row names its topic in a `topic` column
    batch_size: int
    write_id: str
    idempotency_window_ms: int
    request_timeout_ms: int


def writer_options(options: Mapping[str, str], fresh_id: bool = True) -> WriterOptions:
    """fresh_id: a batch write without `writeId` gets a new uuid (made once, in the planning
    worker, and pickled into every task); a stream writer takes its identity from the
    query instead, so it leaves write_id empty."""
    topic = (options.get("topic") or "").strip() or None
    if topic is not None and "," in topic:
        raise OptionError("option 'topic' names one topic; use a 'topic' column for several")
    write_id = (options.get("writeid") or "").strip()
    if ":" in write_id:
        raise OptionError("option 'writeId' must not contain ':'")
    return WriterOptions(
        url=_url(options), topic=topic,
        batch_size=_int(options, "batchSize", BATCH_SIZE_DEFAULT, 1, BATCH_SIZE_MAX),
        write_id=write_id or (uuid.uuid4().hex if fresh_id else ""),
        idempotency_window_ms=_int(options, "idempotencyWindowMs",
                                   IDEMPOTENCY_WINDOW_MS_DEFAULT),
        request_timeout_ms=_int(options, "requestTimeoutMs", REQUEST_TIMEOUT_MS_DEFAULT))
