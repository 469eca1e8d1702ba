"""Idempotency keys that travel with a replicated topic's records (docs/CLUSTER.md 4), so a
retry of a write through a new leader is answered with the write's original seqs.

The leader keeps the keys of its newest keyed writes in a KeyTrail, by the last seq of each
write, and a fetch answer carries those whose write ends inside the answer's records
(`keys`: [key, first seq, last seq] each). A follower stages them in the same batch as the
records, into its own dedupe index and as IDEM_KEY frames in its WAL, exactly as the leader
logged them, so they survive its restart and its checkpoints like the leader's own. Both
kinds of key travel: the caller's idempotency keys and the clients' session keys.

A trail keeps at most KEYS_MAX keys and forgets those every follower has fetched past; a
new leader seeds its trail from its dedupe index (the newest KEYS_MAX), so followers that
catch up from it get the keys it had from its own leader. A follower that falls more than
KEYS_MAX keyed writes behind misses the keys of the oldest (their records still come):
only a retry of one of those, through that follower once it leads, could be stored twice.
"""

from __future__ import annotations

import bisect
import heapq

from topics_actors.ledger.dedupe_index import DedupeEntry
from topics_actors.ledger.topic_state import TopicState
from topics_actors.shard.batch_stager import BatchStager
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType

KEYS_MAX = 16_384           # keys a leader keeps per topic for its followers
KEYS_SLACK = 1_024          # trimmed once it holds this many more


class KeyTrail:
    """A leader's newest keyed writes of one topic: `lasts` (ascending) and, at the same
    index, (key, first seq)."""
    __slots__ = ("lasts", "rows")

    def __init__(self):
        self.lasts: list[int] = []
        self.rows: list[tuple[str, int]] = []

    def __len__(self) -> int:
        return len(self.lasts)

    @classmethod
    def seeded(cls, topic: TopicState) -> "KeyTrail":
        """A new leader's trail: the newest KEYS_MAX keys of its dedupe index."""
        trail = cls()
        newest = heapq.nlargest(KEYS_MAX, topic.dedupe.items(), key=lambda kv: kv[1].last_seq)
        for key, entry in reversed(newest):
            trail.add(key, entry.first_seq, entry.last_seq)
        return trail

    def add(self, key: str, first: int, last: int) -> None:
        """A keyed write of seqs first..last, staged after every write the trail holds (a
        retry's older write is not added again)."""
        lasts = self.lasts
        if lasts and last <= lasts[-1]:
            return
        lasts.append(last)
        self.rows.append((key, first))
        if len(lasts) > KEYS_MAX + KEYS_SLACK:
            self.forget_below(lasts[-KEYS_MAX])

    def forget_below(self, seq: int) -> None:
        """Forget the writes that end before `seq` (every follower has fetched them)."""
        cut = bisect.bisect_left(self.lasts, seq)
        if cut:
            del self.lasts[:cut]
            del self.rows[:cut]

    def within(self, topic: TopicState, first_seq: int, end_leo: int, now_ms: int) -> list:
        """[key, first, last] of the writes ending at seqs first_seq..end_leo-1 whose key
        still names that write here (a write undone or cut since is left out)."""
        lasts, out = self.lasts, []
        window = topic.config.idempotency_window_ms
        for i in range(bisect.bisect_left(lasts, first_seq), len(lasts)):
            last = lasts[i]
            if last >= end_leo:
                break
            key, first = self.rows[i]
            entry = topic.dedupe.lookup(key, now_ms, window)
            if entry is not None and entry.first_seq == first and entry.last_seq == last:
                out.append([key, first, last])
        return out


def stage_keys(stager: BatchStager, topic: TopicState, keys: list, log_end: int,
               sync: bool) -> int:
    """A follower's side: the keys of a fetch answer whose writes its log holds once the
    batch commits (`log_end`: its next seq then), into its dedupe index and its WAL (an
    IDEM_KEY frame each, as the leader logged them). Returns how many were taken."""
    taken = 0
    now = stager.clock()
    window = topic.config.idempotency_window_ms
    for key, first, last in keys:
        if last >= log_end or first < 1 or first > last:
            continue
        if topic.dedupe.lookup(key, now, window) is not None:
            continue
        topic.dedupe.add(key, DedupeEntry(first, last, 0, now), window)
        stager.batch.dedupe_added.append((topic, key))
        if topic.config.logged:
            stager.frame(FrameType.IDEM_KEY, topic,
                         frame_body.encode_idem_key(key, last - first + 1), seq=last,
                         sync=sync)
        taken += 1
    return taken
