"""A topic's tag index: tag -> seqs, so a delete by tag visits only the records it names.

Built on a topic's first delete by tag (one scan of its live records) and kept current on
every append after that (a follower's: every fetched record, `extend`), so topics that never
delete by tag pay nothing. It indexes only the tags the deletes so far could name (their
matches, `covers`): a topic whose deletes name `drop` keeps no seqs of its `keep` records.
A delete whose match it does not cover builds it again, with that match too (one more
scan); past PATTERNS_MAX matches it indexes every tag. It is not persisted: a restarted
shard builds it again on first use. Entries are never removed one by one; a seq that was
deleted or fell below a floor is skipped when the delete reads it. The seqs below the
topic's floor go in `trim`, every TRIM_MIN appends, from every tag, and a tag left with
none goes with them.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Iterator

from topics_actors.storage.frame_body import MATCH_EQ, MATCH_GLOB

TRIM_MIN = 1024          # trim a tag's dead prefix once it is at least this long
PATTERNS_MAX = 64        # matches an index follows one by one; past it, every tag


class TagIndex:
    __slots__ = ("seqs", "tags", "added", "equal", "prefixes")

    def __init__(self, matches: Iterable[tuple[int, str]] = ((MATCH_GLOB, ""),)):
        self.seqs: dict[str, array] = {}
        self.tags: list[str] = []          # sorted, for prefix matches
        self.added = 0                     # seqs added since the last trim
        self.equal: set[str] = set()       # the tags it indexes: these ...
        self.prefixes: list[str] = []      # ... and those starting with one of these
        matches = set(matches)
        if len(matches) > PATTERNS_MAX:
            matches = {(MATCH_GLOB, "")}
        for op, value in matches:
            if op == MATCH_EQ:
                self.equal.add(value)
            else:
                self.prefixes.append(value)

    @classmethod
    def build(cls, first: int, last: int, read: Callable[[int], object],
              matches: Iterable[tuple[int, str]] = ((MATCH_GLOB, ""),)) -> "TagIndex":
        """Index the live records first..last whose tags `matches` can name; `read(seq)`
        gives a record or None."""
        index = cls(matches)
        index.extend(first, last, read)
        return index

    def extend(self, first: int, last: int, read: Callable[[int], object]) -> None:
        """Index the live records first..last, published without their tags at hand (a
        follower's fetched frames): a delete a follower applies through an index lacking
        them would keep records its leader deleted."""
        for seq in range(first, last + 1):
            rec = read(seq)
            if rec is not None and rec.tag is not None:
                self.add(rec.tag, seq)

    def matches(self) -> list[tuple[int, str]]:
        """The matches it follows."""
        return ([(MATCH_EQ, tag) for tag in self.equal]
                + [(MATCH_GLOB, prefix) for prefix in self.prefixes])

    def covers(self, op: int, value: str) -> bool:
        """Whether every tag the match names is indexed."""
        if op == MATCH_EQ and value in self.equal:
            return True
        return any(value.startswith(prefix) for prefix in self.prefixes)

    def add(self, tag: str, seq: int) -> None:
        if tag not in self.equal and not any(tag.startswith(p) for p in self.prefixes):
            return
        seqs = self.seqs.get(tag)
        if seqs is None:
            seqs = self.seqs[tag] = array("Q")
            bisect.insort(self.tags, tag)
        seqs.append(seq)
        self.added += 1

    def trim(self, floor: int) -> None:
        """Every TRIM_MIN seqs added: forget every tag's seqs at or below `floor` (the
        topic's records there are gone), and the tags left with none."""
        if self.added < TRIM_MIN:
            return
        self.added = 0
        for tag, seqs in list(self.seqs.items()):
            if seqs[-1] <= floor:
                del self.seqs[tag]
                del self.tags[bisect.bisect_left(self.tags, tag)]
            else:
                del seqs[:bisect.bisect_right(seqs, floor)]

    def candidates(self, op: int, value: str, floor: int, limit: int) -> Iterator[int]:
        """Seqs in (floor, limit) whose tag matches, ascending within each tag."""
        for tag in self._tags(op, value):
            seqs = self.seqs[tag]
            start = bisect.bisect_right(seqs, floor)
            if start >= TRIM_MIN:
                del seqs[:start]
                start = 0
            end = bisect.bisect_left(seqs, limit, start)
            yield from seqs[start:end]

    def _tags(self, op: int, value: str) -> list[str]:
        if op == MATCH_EQ:
            return [value] if value in self.seqs else []
        tags = self.tags
        i = bisect.bisect_left(tags, value)
        found = []
        while i < len(tags) and tags[i].startswith(value):
            found.append(tags[i])
            i += 1
        return found
