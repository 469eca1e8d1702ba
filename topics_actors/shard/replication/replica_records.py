"""Records between a replicated topic's leader and its followers: what a leader reads for
a fetch, and how a follower stages what it fetched, at the leader's seqs, through its own
WAL (replica_book.py). Records still in the leader's WAL travel as its Append frames
when the follower asks for them (replica_frames.py), those in segments as records.
The leader's retention floors travel with the records: a follower plans no retention of
its own, so every copy drops the same records, at the leader's word, logged like the
leader's (an EvictWatermark)."""

from __future__ import annotations

from typing import NamedTuple

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.errors import InvariantViolation
from topics_actors.ledger.retention_rules import Floors
from topics_actors.ledger.topic_state import TopicState
from topics_actors.record_envelope import payload_bytes
from topics_actors.shard.replication import replica_frames
from topics_actors.shard.batch_stager import BatchStager
from topics_actors.shard.record_append import HEAD_RESERVE
from topics_actors.shard.record_reader import RecordReader
from topics_actors.shard.replication.replica_frames import FrameRun
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FrameType

RECORDS_MAX = 2_000           # records per fetch answer


def read_for(reader: RecordReader, topic: TopicState, fetch_leo: int, budget: int,
             frames: bool = False) -> dict:
    """The records of a fetch answer from `fetch_leo` (seqs without a record are holes),
    each a StoredRecord: (seq, ts, envelope, tag, node, flags), the wire's order. With
    `frames`, those still in the WAL come as their Append frames instead (after the
    records, under "frames", one bin)."""
    seq = max(fetch_leo, topic.earliest_seq())
    records, used = [], 0
    wal_from = max(topic.absorbed + 1, topic.wal_base)
    frames_read = None
    while seq <= topic.head and len(records) < RECORDS_MAX:
        if seq >= wal_from and frames and topic.config.logged:
            stop = replica_frames.unsent_batch(reader.files, topic, seq)
            if stop is not None:      # a batch that cannot go whole: its records, then on
                seq, used = _from_wal(reader, topic, seq, budget, records, used, stop - 1)
                if seq < stop:
                    break
            frames_read, seq, used = replica_frames.read(reader.files, topic, seq, budget,
                                                         used, len(records), RECORDS_MAX)
            break
        if seq >= wal_from:
            seq, used = _from_wal(reader, topic, seq, budget, records, used)
            break
        rec = reader.read(topic, seq)
        if rec is not None:
            if records and used + len(rec.envelope) > budget:
                break
            records.append(rec)
            used += len(rec.envelope)
        seq += 1
    answer = {"topic": topic.name, "first_seq": fetch_leo, "end_leo": seq, "records": records,
              "epochs": epochs_in(topic.epochs, fetch_leo, seq),
              "earliest_seq": topic.earliest_seq(),
              "floors": [topic.evict_floor, topic.expiry_floor]}
    if frames:
        answer["frames"] = frames_read or b""
    return answer


def _from_wal(reader: RecordReader, topic: TopicState, seq: int, budget: int, records: list,
              used: int, last: int | None = None) -> tuple[int, int]:
    """read_for's loop over the records only in the WAL (a follower in step reads only
    these), up to seq `last` (None: the head): their locations straight off the topic's
    index, one read each. Returns the next seq and the bytes used."""
    locs, base, read = topic.locs, topic.wal_base, reader.files.read
    end = min(topic.head, base + len(locs) - 1)        # a seq past the index is a hole
    last = end if last is None else min(last, end)
    for seq in range(seq, last + 1):
        loc = locs[seq - base]
        if not loc:
            continue                                   # a hole
        rec = read(loc, seq)
        size = len(rec.envelope)
        if records and used + size > budget:
            return seq, used
        records.append(rec)
        used += size
        if len(records) >= RECORDS_MAX:
            return seq + 1, used
    return (topic.head + 1 if last == end else last + 1), used


class CopiedRun(NamedTuple):
    """Staged records of contiguous seqs, to publish as one."""
    first: int
    ts: int                  # the last record's
    start: int               # where their frames start in the batch
    offsets: list[int]       # each frame's offset from there
    payload_bytes: int

    def locs(self, base: int) -> list[int]:
        """The records' locations, the batch starting at location `base`."""
        at = base + self.start
        return [at + rel for rel in self.offsets]


def append_fetched(stager: BatchStager, topic: TopicState, records: list,
                   runs: list[FrameRun], new_epochs: list[tuple[int, int]],
                   end_leo: int) -> list[CopiedRun]:
    """Stage fetched records, then fetched frames (`runs`, checked: replica_frames.py), and
    the epochs that start among them, up to `end_leo`: head marks for the holes, Append
    frames for each run of one timestamp, the leader's frames as they are. Returns the
    runs to publish."""
    sync = topic.config.durability.acks_after_fsync
    for (epoch, start), (after, after_start) in zip(new_epochs, new_epochs[1:]):
        if after <= epoch or after_start < start:
            raise InvariantViolation(f"epochs of {topic.name!r} staged out of order: "
                                     f"{epoch}@{start} then {after}@{after_start}")
    for epoch, start in new_epochs:
        stager.frame(FrameType.EPOCH, topic, frame_body.encode_u64(epoch), seq=start)
    staged = []
    for first, ts, run in _runs(records):
        _pad(stager, topic, first)
        offsets = stager.appends(topic, first, ts, run, sync) if topic.config.logged else []
        topic.next_seq = first + len(run)
        staged.append(CopiedRun(first, ts, 0, offsets, sum(r[4] for r in run)))
    for run in runs:
        _pad(stager, topic, run.first)
        start = stager.frames(topic, run.first, run.frames, sync)
        topic.next_seq = run.first + len(run.offsets)
        staged.append(CopiedRun(run.first, run.ts, start, run.offsets, run.payload_bytes))
    _pad(stager, topic, end_leo)
    topic.next_seq = max(topic.next_seq, end_leo)
    _reserve(stager, topic, end_leo - 1)
    return staged


def _reserve(stager: BatchStager, topic: TopicState, last: int) -> None:
    """A `disk` copy reserves seqs ahead of what it holds, as its leader does
    (record_append.py): synced with the batch, before its fetch reports the batch, so if it
    leads after a power loss of every copy it never issues a seq it may have held (and its
    leader acked). Staged after the batch's head marks, which replay reads as the end of
    any earlier reservation."""
    if topic.config.durability.reserves_head and last > topic.reserved_head:
        topic.reserved_head = last + HEAD_RESERVE
        stager.frame(FrameType.HEAD_WATERMARK, topic, frame_body.encode_u64(topic.reserved_head))


def _pad(stager: BatchStager, topic: TopicState, seq: int) -> None:
    """A head mark for the holes before `seq` (deleted or evicted at the leader)."""
    if seq > topic.next_seq:
        stager.frame(FrameType.HEAD_WATERMARK, topic, frame_body.encode_u64(seq - 1),
                     seq=seq - 1)


def take_floors(stager: BatchStager, topic: TopicState, floors: list | None,
                 log_end: int) -> Floors | None:
    """The leader's floors as far as this copy's log goes once the batch commits (`log_end`:
    its next seq then), logged when they rise; None when they do not. The caller raises
    them after the records of the batch are published (retention_rules.apply)."""
    if not floors:
        return None
    last = log_end - 1
    target = Floors(min(floors[0], last), min(floors[1], last))
    if target.evict <= topic.evict_floor and target.expiry <= topic.expiry_floor:
        return None
    stager.frame(FrameType.EVICT_WATERMARK, topic, frame_body.encode_evict(
        frame_body.EvictBody(target.evict, target.earliest, target.expiry)))
    return target


def _runs(records: list) -> list[tuple[int, int, list]]:
    """Group fetched records into runs of contiguous seqs with one timestamp, each as
    (first seq, ts, staged records) ready for the Append frame encoder."""
    runs: list[tuple[int, int, list]] = []
    for seq, ts, envelope, tag, node, flags in records:
        staged = (envelope, (tag or "").encode(), (node or "").encode(), flags,
                  payload_bytes(len(envelope), flags))
        if runs and runs[-1][1] == ts and runs[-1][0] + len(runs[-1][2]) == seq:
            runs[-1][2].append(staged)
        else:
            runs.append((seq, ts, [staged]))
    return runs


def epochs_in(cache: EpochCache, first: int, end: int) -> list[list[int]]:
    """The epoch of seq `first` and every epoch starting before `end` (a follower's cache
    needs the epoch of each record it receives)."""
    out = [[e, max(s, 1)] for e, s in cache.entries() if s < end]
    covering = [e for e in out if e[1] <= first]
    later = [e for e in out if e[1] > first]
    return covering[-1:] + later
