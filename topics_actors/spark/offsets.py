"""Offsets: the option values `earliest` / `latest` / JSON, and the streaming offset.

A streaming offset is `{"v": 1, "topics": {"<topic>": <last consumed seq>}}`, emitted
canonically (topics sorted, integers), because Spark decides "no new data" by comparing the
JSON of two offsets (spec/spark.md P15). The seq is exclusive for the next batch: the next
batch reads seqs above it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

OFFSET_VERSION = 1
EARLIEST = "earliest"
LATEST = "latest"
SEQ_MAX = 2**63 - 1          # Spark's BIGINT is signed: seqs must stay below 2^63


@dataclasses.dataclass(frozen=True)
class OffsetSpec:
    """`earliest`, `latest`, or per-topic seqs (with `default` for unlisted topics).

    For startingOffsets a seq is the last one *not* read (exclusive); for endingOffsets the
    last one read (inclusive)."""
    default: str                               # EARLIEST or LATEST
    seqs: tuple[tuple[str, int], ...] = ()

    def get(self, topic: str) -> int | str:
        return dict(self.seqs).get(topic, self.default)


def is_seq(value) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and -2 <= value <= SEQ_MAX)


def resolve(spec: OffsetSpec, topic: str, earliest_seq: int, head_seq: int,
            inclusive_end: bool) -> int:
    """A spec's seq for a topic as a cursor: for a start, the last seq not to read; for an
    end (inclusive_end), the last seq to read. Clipped to what the topic holds."""
    value = spec.get(topic)
    if value == EARLIEST:
        return earliest_seq - 1
    if value == LATEST:
        return head_seq
    return min(value, head_seq) if inclusive_end else value


def encode_offset(positions: Mapping[str, int]) -> dict:
    """The canonical offset (a dict that json.dumps writes with sorted topics)."""
    return {"v": OFFSET_VERSION,
            "topics": {topic: int(positions[topic]) for topic in sorted(positions)}}


def decode_offset(offset: Mapping) -> dict[str, int]:
    """The per-topic positions of a (checkpointed) offset; ValueError when malformed."""
    if not isinstance(offset, Mapping) or offset.get("v") != OFFSET_VERSION:
        raise ValueError(f"not a topics offset of version {OFFSET_VERSION}: {offset!r}")
    topics = offset.get("topics")
    if not isinstance(topics, Mapping) or not all(
            isinstance(k, str) and is_seq(v) and v >= 0 for k, v in topics.items()):
        raise ValueError(f"malformed topics offset: {offset!r}")
    return dict(topics)
