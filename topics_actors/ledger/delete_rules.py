"""The rules of permanent record deletes (spec/api.md 5.7, spec/storage.md 3.3): voluntary,
silent, point-in-time.

A delete names `before_seq` and/or a tag `match`, and is bounded by the head at call time
(`bound`: records appended later are never touched). A `before_seq`-only delete raises the
topic's delete_floor; a match deletes each matching live record below the limit. Deletes
never move the involuntary floors, so they never produce a tombstone. The same function
applies a delete live, in a shard's recovery and in the compactor; only `mark` differs (a
hole in the shard's index, or the segment's del byte).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from topics_actors.errors import invalid
from topics_actors.ledger import retention_rules
from topics_actors.ledger.tag_index import TagIndex
from topics_actors.ledger.topic_state import TopicState
from topics_actors.storage.frame_body import MATCH_EQ, MATCH_GLOB

Match = tuple[int, str]


def parse_match(raw: Any) -> Match | None:
    """`["tag", "Eq", "v"]`, `["tag", "Glob", "p*"]` or a bare string (Eq, or Glob when it
    ends in `*`); None when absent. A Glob's value is the prefix before the final `*`."""
    if raw is None:
        return None
    if isinstance(raw, str):
        return (MATCH_GLOB, raw[:-1]) if raw.endswith("*") else (MATCH_EQ, raw)
    if (not isinstance(raw, list) or len(raw) != 3 or not all(isinstance(p, str) for p in raw)
            or raw[0] != "tag" or raw[1] not in ("Eq", "Glob")):
        raise invalid('match must be ["tag", "Eq"|"Glob", value] or a tag string')
    if raw[1] == "Eq":
        return MATCH_EQ, raw[2]
    if not raw[2].endswith("*"):
        raise invalid("a Glob match must end in '*'")
    return MATCH_GLOB, raw[2][:-1]


def matches(match: Match, tag: str | None) -> bool:
    if tag is None:   # untagged records never match
        return False
    op, value = match
    return tag == value if op == MATCH_EQ else tag.startswith(value)


def apply(topic: TopicState, read: retention_rules.Reader, before_seq: int | None,
          match: Match | None, bound: int, mark: Callable[[TopicState, int], None],
          account: bool = True, indexed: bool = False) -> int:
    """Delete what the selector names below min(before_seq, bound); returns how many live
    records went. `read(topic, seq)` gives a record or None; `mark` removes one record.
    Without `account` (the compactor) count and bytes are left alone. `indexed` (the live
    shard only: replay and the compactor do not keep the index current) finds matches
    through the topic's tag index."""
    limit = min(before_seq if before_seq is not None else bound, bound)
    if match is None:
        topic.delete_floor = max(topic.delete_floor, limit - 1)
        gone = retention_rules.drop_below(topic, read, topic.earliest_seq()) if account else 0
    else:
        floor = live_floor(topic)
        limit = min(limit, topic.head + 1)
        seqs = _candidates(topic, read, match, floor, limit, indexed)
        return _remove(topic, read, seqs, lambda rec: matches(match, rec.tag), mark, account)
    topic.deletions += gone
    return gone


def live_floor(topic: TopicState) -> int:
    """Records at or below this seq are gone (retention, before_seq deletes)."""
    return max(topic.evict_floor, topic.expiry_floor, topic.delete_floor,
               topic.source_trim_floor)


def delete_seqs(topic: TopicState, read: retention_rules.Reader, seqs: Iterable[int],
                mark: Callable[[TopicState, int], None], account: bool = True) -> int:
    """Delete the named live records (a queue's acked or dead-lettered jobs); returns how
    many went. Seqs below the floors or without a record are already gone."""
    floor = live_floor(topic)
    return _remove(topic, read, (s for s in seqs if floor < s <= topic.head),
                   lambda rec: True, mark, account)


def delete_jobs(topic: TopicState, read: retention_rules.Reader, jobs: Iterable[tuple[int, int]],
                mark: Callable[[TopicState, int], None]) -> int:
    """delete_seqs for (seq, payload bytes) pairs (a queue's acked jobs, sized when claimed):
    a job with a size is not read again, its liveness is the floors' and the notes of
    earlier deletes (every delete is noted in `topic.deleted` until a floor passes it);
    one of size -1 (unknown) is read as delete_seqs reads it. Returns how many went."""
    floor, deleted, gone, unknown = live_floor(topic), topic.deleted, 0, []
    for seq, size in jobs:
        if size < 0:
            unknown.append(seq)
        elif floor < seq <= topic.head and seq not in deleted:
            topic.count -= 1
            topic.bytes -= size
            mark(topic, seq)
            gone += 1
    topic.deletions += gone
    return gone + (delete_seqs(topic, read, unknown, mark) if unknown else 0)


def _remove(topic: TopicState, read: retention_rules.Reader, seqs: Iterable[int],
            selected: Callable[[Any], bool], mark: Callable[[TopicState, int], None],
            account: bool) -> int:
    gone = 0
    for seq in seqs:
        rec = read(topic, seq)
        if rec is not None and selected(rec):
            if account:
                topic.count -= 1
                topic.bytes -= retention_rules.record_size(rec)
            mark(topic, seq)
            gone += 1
    topic.deletions += gone
    return gone


def _candidates(topic: TopicState, read: retention_rules.Reader, match: Match, floor: int,
                limit: int, indexed: bool) -> Iterable[int]:
    """The seqs a match may name: from the topic's tag index (built on first use), else
    every seq of the range."""
    if not indexed:
        return range(floor + 1, limit)
    if topic.tags is None or not topic.tags.covers(*match):
        known = topic.tags.matches() if topic.tags is not None else []
        topic.tags = TagIndex.build(floor + 1, topic.head, lambda seq: read(topic, seq),
                                    known + [tuple(match)])
    return sorted(topic.tags.candidates(match[0], match[1], floor, limit))
