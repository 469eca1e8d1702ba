"""One topic's published state inside its shard: head, floors and the seq -> record index.

Records up to `absorbed` live in segment files (the last snapshot lists them: first seq and
count of each, so a seq finds its segment by bisection and its .idx entry by arithmetic, at
no memory cost per record). Records after `absorbed` are still only in the WAL, or in the
RAM buffer of an ephemeral topic: `locs` holds one u64 location per seq from `wal_base`
(8 bytes per record, 0 = hole; an ephemeral topic's `wal_base` follows its floors,
shard/ram_buffer.py). Staged but
uncommitted work only moves `next_seq` and `reserved_head`; the rest changes on publish.
"""

from __future__ import annotations

import bisect
from array import array

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.dedupe_index import DedupeIndex
from topics_actors.ledger.deleted_seqs import DeletedSeqs
from topics_actors.storage.file_table import OFFSET_BITS
from topics_actors.topic_config import TopicConfig
from topics_actors.topic_identity import topic_id

AUTO_PRIORITY_WINDOW_MS = 300_000
AUTO_PRIORITY_HALF_LIFE_MS = 30_000
AUTO_PRIORITY_MAX = 500


class TopicState:
    __slots__ = ("name", "tid", "config", "head", "next_seq", "reserved_head", "wal_base",
                 "locs", "front", "count", "bytes", "last_write_ts", "last_read_ts",
                 "evict_floor", "expiry_floor", "delete_floor", "source_trim_floor",
                 "dedupe", "ram_file", "ram", "ram_chunks", "indexed", "absorbed", "seg_dir",
                 "seg_firsts", "seg_counts", "created_at", "ram_past", "gone_through",
                 "deleted", "deletions", "tags", "queue", "routers", "trims", "epochs",
                 "hw", "ops", "follower", "unsettled_epoch")

    def __init__(self, name: str, config: TopicConfig, tid: int | None = None,
                 indexed: bool = True):
        self.name = name
        self.tid = topic_id(name) if tid is None else tid
        self.config = config
        self.head = 0                 # highest published seq
        self.next_seq = 1             # next seq to stage
        self.reserved_head = 0        # disk class: highest seq covered by a HeadWatermark
        self.wal_base = 1             # seq of locs[0]
        self.locs = array("Q")
        self.front = 0                # index of the first possibly-live slot
        self.count = 0
        self.bytes = 0
        self.last_write_ts: int | None = None
        self.last_read_ts: int | None = None
        self.evict_floor = 0
        self.expiry_floor = 0
        self.delete_floor = 0
        self.source_trim_floor = 0
        self.dedupe = DedupeIndex()
        self.ram_file = 0             # ephemeral topics: file number of the open RAM chunk
        self.ram: bytearray | None = None
        self.ram_chunks = None        # deque of the closed ones (file no, last seq, bytes)
        self.indexed = indexed        # False in the compactor: it keeps no WAL locations
        self.absorbed = 0             # records <= this seq are in segments (or holes)
        self.seg_dir = ""             # the topic's segment directory (absolute)
        self.seg_firsts: list[int] = []
        self.seg_counts: list[int] = []
        self.created_at = (0, 0, 0)   # WAL position (generation, file idx, offset) of creation
        self.ram_past: dict[int, int] = {}   # absorbed seqs whose record is in the RAM buffer
        self.gone_through = 0         # records up to here are out of count and bytes
        self.deleted = DeletedSeqs()  # seqs deleted one by one (segments keep their bytes)
        self.deletions = 0            # records deleted so far (for the checkpoint accounting)
        self.tags = None              # TagIndex once a delete by tag needed one
        self.queue = None             # QueueState of a queue topic (ledger/queue_state.py)
        self.routers: dict | None = None   # routers feeding this topic, by name (router_state)
        self.trims: list | None = None     # [first, last] seq runs standing for source
                                           # records a router could not copy (source_trim)
        self.epochs = None            # EpochCache of a replicated topic (cluster/epoch_cache)
        self.hw: int | None = None    # a replicated topic's high watermark: readers see no
                                      # seq above it (None: not replicated, the head rules)
        self.ops = None               # OpLog of a replicated topic's deletes (ledger/op_log)
        self.follower = False         # a replicated topic's copy following its leader: its
                                      # floors are the leader's (replica_records.py)
        self.unsettled_epoch: int | None = None   # a replicated copy recovered in this
                                      # epoch: it may not lead in it (leader_duties.py)

    # --- publishing -------------------------------------------------------------------

    def pad_to(self, seq: int) -> None:
        """Make `seq` the head, leaving holes for seqs that have no record."""
        if seq > self.head:
            if self.indexed:
                self.locs.frombytes(bytes(8 * (seq - self.head)))
            self.head = seq
        self.next_seq = max(self.next_seq, self.head + 1)
        self.reserved_head = max(self.reserved_head, self.head)

    def publish(self, first_seq: int, locs: list[int], payload_bytes: int, ts: int) -> None:
        """Records first_seq.. become visible: the head only ever moves to the next seq."""
        if first_seq != self.head + 1:
            raise InvariantViolation(f"{self.name!r}: publishing seq {first_seq} after head "
                                     f"{self.head}")
        if self.indexed:
            self.locs.extend(locs)
        self.head = first_seq + len(locs) - 1
        self.next_seq = max(self.next_seq, self.head + 1)
        self.count += len(locs)
        self.bytes += payload_bytes
        self.last_write_ts = ts

    def publish_one(self, seq: int, loc: int, payload_bytes: int, ts: int) -> None:
        """publish() for one record at head + 1 (the replay path)."""
        if self.indexed:
            self.locs.append(loc)
        self.head = seq
        if self.next_seq <= seq:
            self.next_seq = seq + 1
        self.count += 1
        self.bytes += payload_bytes
        self.last_write_ts = ts

    def loc(self, seq: int) -> int:
        """The WAL location of `seq` (> absorbed); 0 for a hole."""
        index = seq - self.wal_base
        return self.locs[index] if 0 <= index < len(self.locs) else 0

    def delete_one(self, seq: int) -> None:
        """Make `seq` a hole in the WAL index, and note it: a snapshot taken in later may
        hold the record (absorbed before the delete's frame) with its del byte not yet
        flipped, and the WAL hole goes when that snapshot is taken in."""
        index = seq - self.wal_base
        if seq > self.absorbed and 0 <= index < len(self.locs):
            self.locs[index] = 0
        self.deleted.add(seq)

    def segment_of(self, seq: int) -> int:
        """Index of the segment holding `seq` (<= absorbed), or -1 for a hole."""
        i = bisect.bisect_right(self.seg_firsts, seq) - 1
        if i >= 0 and seq < self.seg_firsts[i] + self.seg_counts[i]:
            return i
        return -1

    def absorb(self, absorbed: int, seg_dir: str, firsts: list[int], counts: list[int]) -> int:
        """Records up to `absorbed` are now in the given segments: drop their WAL locations.
        Returns the lowest WAL location still referenced (0 if none)."""
        if absorbed > self.absorbed:
            drop = min(len(self.locs), absorbed + 1 - self.wal_base)
            if drop > 0:
                if self.ram_file:   # records of an ephemeral past are in no segment: keep them
                    ram = {self.ram_file, *(chunk[0] for chunk in self.ram_chunks or ())}
                    self.ram_past.update(
                        (self.wal_base + i, loc) for i, loc in enumerate(self.locs[:drop])
                        if loc >> OFFSET_BITS in ram)
                del self.locs[:drop]
            self.front = max(0, self.front - max(drop, 0))
            # (above absorbed + 1 when an ephemeral past trimmed it: shard/ram_buffer.py)
            self.wal_base = max(self.wal_base, absorbed + 1)
            self.absorbed = absorbed
            floor = max(self.evict_floor, self.expiry_floor, self.delete_floor)
            if self.deleted and self.deleted.first() <= floor:   # never read again
                self.deleted.drop_through(floor)
        self.seg_dir, self.seg_firsts, self.seg_counts = seg_dir, firsts, counts
        return next((loc for loc in self.locs if loc), 0)

    def add_trim(self, first: int, last: int) -> None:
        """Seqs first..last stand for source records evicted before a router copied them:
        a reader arriving at `first` gets a `source_trim` tombstone (shard/diff_read.py).
        Runs wholly below the live records are forgotten."""
        floor = max(self.evict_floor, self.expiry_floor, self.delete_floor)
        self.trims = [t for t in self.trims or () if t[1] > floor] + [[first, last]]

    # --- derived values -----------------------------------------------------------------

    @property
    def visible(self) -> int:
        """The highest seq readers may see: the head, or the high watermark of a
        replicated topic (records above it are not on every in-sync replica yet)."""
        return self.head if self.hw is None else min(self.head, self.hw)

    def involuntary_earliest(self) -> int:
        floor = max(self.evict_floor, self.expiry_floor, self.source_trim_floor)
        return min(max(floor + 1, 1), self.head + 1)

    def earliest_seq(self) -> int:
        floor = max(self.evict_floor, self.expiry_floor, self.delete_floor,
                    self.source_trim_floor)
        seq = min(max(floor + 1, 1), self.head + 1)
        while seq <= self.absorbed:
            i = bisect.bisect_right(self.seg_firsts, seq) - 1
            if i >= 0 and seq < self.seg_firsts[i] + self.seg_counts[i]:
                if seq not in self.deleted:
                    return seq
                seq = self.deleted.next_absent(seq)
                continue
            found = [self.seg_firsts[i + 1]] if i + 1 < len(self.seg_firsts) else []
            found += [s for s in self.ram_past if s >= seq]
            if not found:
                seq = self.absorbed + 1
                break
            seq = min(found)
            if seq not in self.deleted:
                return seq
            seq = self.deleted.next_absent(seq)
        locs, base = self.locs, self.wal_base
        index = max(seq - base, self.front)
        while index < len(locs) and locs[index] == 0:
            index += 1
        self.front = index
        return min(max(seq, base + index), self.head + 1)

    def effective_priority(self, now_ms: int) -> int:
        base = max(-1000, min(1000, self.config.priority or 0))
        auto = 0.0
        if (self.config.priority is None and self.config.auto_priority
                and self.last_read_ts is not None
                and now_ms - self.last_read_ts <= AUTO_PRIORITY_WINDOW_MS):
            idle = max(0, now_ms - self.last_read_ts)
            auto = AUTO_PRIORITY_MAX * 2 ** (-idle / AUTO_PRIORITY_HALF_LIFE_MS)
        return round(base + auto)

    def summary(self, now_ms: int) -> dict:
        return {"topic": self.name, "head_seq": self.visible,
                "earliest_seq": self.earliest_seq(),
                "count": self.count, "bytes": self.bytes, "durable": self.config.durable,
                "effective_priority": self.effective_priority(now_ms),
                "durability": self.config.durability.value}

    def state(self, now_ms: int) -> dict:
        return {"topic": self.name, "type": self.config.type, "head_seq": self.visible,
                "earliest_seq": self.earliest_seq(), "next_seq": self.visible + 1,
                "count": self.count, "bytes": self.bytes, "config": self.config.to_json(),
                "effective_priority": self.effective_priority(now_ms),
                "last_write_ts": self.last_write_ts, "last_read_ts": self.last_read_ts}
