"""Pure planning: seq ranges per topic, pushed-down filters, per-trigger budgets.

No Spark and no sockets here, so all of it is unit-tested directly. A range is
(after_seq, until_seq]: the reader asks the server for seqs above `after_seq` up to and
including `until_seq`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from topics_actors.spark.offsets import SEQ_MAX, OffsetSpec, resolve


@dataclasses.dataclass(frozen=True)
class TopicBounds:
    earliest_seq: int        # first live seq (head_seq + 1 when the topic is empty)
    head_seq: int


@dataclasses.dataclass(frozen=True)
class SeqRange:
    topic: str
    after_seq: int           # exclusive
    until_seq: int           # inclusive

    @property
    def size(self) -> int:
        return max(0, self.until_seq - self.after_seq)


@dataclasses.dataclass(frozen=True)
class SeqWindow:
    """What pushed-down filters leave of a topic's seqs: (after_seq, until_seq]."""
    after_seq: int = -1
    until_seq: int = SEQ_MAX

    def narrow(self, op: str, value: int) -> "SeqWindow":
        after, until = self.after_seq, self.until_seq
        if op == ">":
            after = max(after, value)
        elif op == ">=":
            after = max(after, value - 1)
        elif op == "<":
            until = min(until, value - 1)
        elif op == "<=":
            until = min(until, value)
        elif op == "=":
            after, until = max(after, value - 1), min(until, value)
        else:
            raise ValueError(f"unknown seq comparison {op!r}")
        return SeqWindow(after, until)


@dataclasses.dataclass(frozen=True)
class Selection:
    """The pushed-down part of a query: which topics, which seqs (None = all topics)."""
    topics: frozenset[str] | None = None
    window: SeqWindow = SeqWindow()

    def only(self, names: Iterable[str]) -> "Selection":
        names = frozenset(names)
        return Selection(names if self.topics is None else self.topics & names, self.window)

    def seqs(self, op: str, value: int) -> "Selection":
        return Selection(self.topics, self.window.narrow(op, value))


def split_range(topic: str, after_seq: int, until_seq: int, per_partition: int) -> list[SeqRange]:
    """(after_seq, until_seq] cut into chunks of at most per_partition seqs."""
    out, lo = [], after_seq
    while lo < until_seq:
        hi = min(until_seq, lo + per_partition)
        out.append(SeqRange(topic, lo, hi))
        lo = hi
    return out


def plan_batch(bounds: Mapping[str, TopicBounds], starting: OffsetSpec, ending: OffsetSpec,
               per_partition: int, selection: Selection = Selection()) -> list[SeqRange]:
    """The ranges of a batch read, pinned to the heads seen at planning time (spec 6.4)."""
    ranges = []
    for topic in sorted(bounds):
        if selection.topics is not None and topic not in selection.topics:
            continue
        b = bounds[topic]
        lo = resolve(starting, topic, b.earliest_seq, b.head_seq, inclusive_end=False)
        hi = resolve(ending, topic, b.earliest_seq, b.head_seq, inclusive_end=True)
        lo = max(lo, selection.window.after_seq)
        hi = min(hi, b.head_seq, selection.window.until_seq)
        ranges += split_range(topic, lo, hi, per_partition)
    return ranges


def plan_stream(start: Mapping[str, int], end: Mapping[str, int],
                per_partition: int) -> list[SeqRange]:
    """The ranges of one micro-batch: deterministic from (start, end), so a replay reads the
    same records."""
    ranges = []
    for topic in sorted(end):
        lo = start.get(topic, end[topic])
        ranges += split_range(topic, lo, end[topic], per_partition)
    return ranges


def admit(start: Mapping[str, int], latest: Mapping[str, int],
          max_rows: int | None) -> dict[str, int]:
    """Where the next micro-batch ends: `latest`, or less so that at most max_rows seqs are
    read, shared fairly (water-filling: a topic with little new data leaves its share to
    the others). A topic never moves backwards."""
    end = {t: max(latest[t], start.get(t, latest[t])) for t in latest}
    if max_rows is None:
        return end
    waiting = sorted((end[t] - start.get(t, end[t]), t) for t in end)
    left, out = max_rows, {}
    for i, (available, topic) in enumerate(waiting):
        share = left // (len(waiting) - i)
        take = min(available, share)
        out[topic] = start.get(topic, end[topic]) + take
        left -= take
    if left and waiting:            # the remainder of an uneven split: first topic with room
        for available, topic in reversed(waiting):
            room = end[topic] - out[topic]
            take = min(room, left)
            out[topic] += take
            left -= take
    return out
