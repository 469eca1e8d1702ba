"""The oracle of the in-process crash sweeps: a model of every topic, advanced only by what
the engine acked, and the check of a recovered shard against it (spec/storage.md 7).

A write is *acked* once its reply came back, *in flight* if the process died before the
reply (it may or may not have happened), *failed* if it got an error (it never happened).
An acked record or delete of class disk or memory is *hardened* once no byte of its shard's
WAL waits for a sync (CrashFs.dirty_paths): from then on a power loss cannot take it.

`TopicModel.check(recovered, mode)` asserts, per topic (invariant numbers of section 7):
  - exists iff its create was acked and no delete was (either when one was in flight) [61]
  - the config is the acked one [61]
  - every record is byte-identical to an acked (or in-flight) one: nothing fabricated,
    nothing from an older incarnation, no failed write [3, 4]
  - no record a durable delete removed, none at or below an involuntary floor [37, 44]
  - every acked record that must survive does: fsync always; disk when hardened or after
    a process crash (mode keep); never required: memory, ephemeral, a record below the
    recovered involuntary floor, TTL-expired ones [1, 2, 60]
  - disk and memory lose only a suffix: no acked record is missing below a present one [5]
  - the involuntary floor never went down and rose only as far as the config allows (head
    minus cap_records, below the newest records that surely fit in cap_bytes, the TTL)
    [43, 44]; a cursor from 0 gets exactly the tombstone [1, floor] and none without a
    floor (deletes are silent) [41, 42]
  - head: fsync == highest acked (or in flight), disk in [highest acked, highest staged +
    256], memory <= highest staged [7, 8, 60]; ephemeral topics hold no record [60]
"""

from __future__ import annotations

import dataclasses

from topics_actors.ledger.delete_rules import matches, parse_match
from topics_actors.shard.record_append import HEAD_RESERVE


@dataclasses.dataclass
class Delete:
    victims: set[int]
    floor: int                 # every seq <= floor is gone (a before_seq delete)
    hardened: bool = False
    in_flight: bool = False


@dataclasses.dataclass
class TopicModel:
    name: str
    config: dict
    shard: int
    incarnation: int = 0
    exists: bool = False
    maybe_exists: bool = False          # a create or delete was in flight
    echo: dict | None = None            # the config echo of the acked create
    rows: dict = dataclasses.field(default_factory=dict)         # seq -> acked row
    maybe_rows: dict = dataclasses.field(default_factory=dict)   # seq -> in-flight row
    hardened_upto: int = 0
    next_seq: int = 1
    max_acked: int = 0
    max_staged: int = 0
    deletes: list = dataclasses.field(default_factory=list)
    floor_seen: int = 0

    @property
    def durability(self) -> str:
        return self.config.get("durability") or (
            "fsync" if self.config.get("durable") else "disk")

    # --- advancing -------------------------------------------------------------------------

    def created(self, echo: dict | None, in_flight: bool = False) -> None:
        if in_flight:
            self.maybe_exists = True
            return
        if not self.exists:
            self.reset()
        self.exists, self.echo = True, echo

    def deleted(self, in_flight: bool = False) -> None:
        if in_flight:
            self.maybe_exists = True
            return
        self.exists = False
        self.reset()

    def reset(self) -> None:
        self.incarnation += 1
        self.rows, self.maybe_rows, self.deletes = {}, {}, []
        self.hardened_upto = self.max_acked = self.max_staged = self.floor_seen = 0
        self.next_seq = 1

    def appended(self, rows: list[list], in_flight: bool = False) -> None:
        first = self.next_seq
        numbered = {first + i: [first + i, *row] for i, row in enumerate(rows)}
        self.max_staged = max(self.max_staged, first + len(rows) - 1)
        if in_flight:
            self.maybe_rows.update(numbered)
            return
        self.rows.update(numbered)
        self.next_seq = first + len(rows)
        self.max_acked = max(self.max_acked, self.next_seq - 1)

    def record_delete(self, before_seq: int | None, match, in_flight: bool = False) -> None:
        limit = min(before_seq if before_seq is not None else self.next_seq, self.next_seq)
        if match is None:
            self.deletes.append(Delete(set(), limit - 1, in_flight=in_flight))
            return
        parsed = parse_match(match)
        victims = {s for s, row in self.rows.items() if s < limit and matches(parsed, row[3])}
        self.deletes.append(Delete(victims, 0, in_flight=in_flight))

    def harden(self) -> None:
        self.hardened_upto = self.max_acked
        for delete in self.deletes:
            delete.hardened = True

    # --- checking ------------------------------------------------------------------------

    def durable(self, hardened: bool, mode: str) -> bool:
        return self.durability == "fsync" or hardened or mode == "keep"

    def forbidden(self, seq: int, mode: str) -> bool:
        return any((seq in d.victims or seq <= d.floor) for d in self.deletes
                   if not d.in_flight and self.durable(d.hardened, mode))

    def maybe_deleted(self, seq: int) -> bool:
        return any((seq in d.victims or seq <= d.floor) for d in self.deletes)

    def allowed_floor(self, head: int, now_ms: int) -> int:
        allowed = self.floor_seen
        cap = self.config.get("cap_records", 0)
        if cap:
            allowed = max(allowed, head - cap)
        rows = {**self.rows, **self.maybe_rows}
        cap_bytes = self.config.get("cap_bytes", 0)
        if cap_bytes and rows:
            # the newest k seqs weigh at most k * the largest record <= cap_bytes: never evicted
            largest = max(len(row[2]) for row in rows.values())
            allowed = max(allowed, head - cap_bytes // largest)
        ttl = self.config.get("ttl_ms", 0)
        if ttl:
            allowed = max([allowed] + [s for s, r in rows.items() if now_ms - r[1] > ttl])
        return allowed

    def check(self, got, mode: str, now_ms: int, restarted: bool = True) -> None:
        """`got`: the recovered topic (Recovered) or None when it does not exist; without
        `restarted`, the live topic of a running shard (ephemeral records count too)."""
        where = f"{self.name} (incarnation {self.incarnation}, mode {mode})"
        if got is None:
            assert not self.exists or self.maybe_exists, f"{where}: acked topic is gone"
            return
        assert self.exists or self.maybe_exists, f"{where}: a deleted topic came back"
        if not self.exists:        # a create in flight: nothing was acked under it
            assert not got.rows or self.maybe_rows, f"{where}: records in an unacked topic"
        if self.echo is not None:
            assert got.config == self.echo, f"{where}: config {got.config} != {self.echo}"
        if self.durability == "ephemeral" and restarted:
            assert not got.rows, f"{where}: an ephemeral topic kept records over a restart"
            return
        self._check_rows(got, mode, now_ms, where)
        self._check_floor(got, now_ms, where)
        self._check_head(got, where)

    def _check_rows(self, got, mode: str, now_ms: int, where: str) -> None:
        ttl = self.config.get("ttl_ms", 0)
        for seq, row in got.rows.items():
            expected = (self.rows.get(seq), self.maybe_rows.get(seq))
            assert row in expected, f"{where}: seq {seq} is {row}, acked {expected}"
            assert not self.forbidden(seq, mode), f"{where}: deleted seq {seq} came back"
            assert seq > got.floor, f"{where}: seq {seq} at or below the floor {got.floor}"
        if self.durability == "memory":
            return
        lost = []
        for seq, row in self.rows.items():
            hardened = seq <= self.hardened_upto
            if (seq <= got.floor or self.maybe_deleted(seq) or seq in got.rows
                    or (ttl and now_ms - row[1] > ttl)):
                continue
            if self.durable(hardened, mode):
                lost.append(seq)
            elif self.durability == "disk" and any(s > seq for s in got.rows):
                raise AssertionError(f"{where}: hole at disk seq {seq} below a survivor")
        assert not lost, f"{where}: acked seqs lost: {lost}"

    def _check_floor(self, got, now_ms: int, where: str) -> None:
        assert got.floor >= self.floor_seen, (
            f"{where}: floor went down from {self.floor_seen} to {got.floor}")
        allowed = self.allowed_floor(got.head, now_ms)
        assert got.floor <= allowed, f"{where}: floor {got.floor} above allowed {allowed}"
        if got.floor:
            assert got.tombstone is not None and (got.tombstone["gap_from"],
                                                  got.tombstone["gap_to"]) == (1, got.floor), (
                f"{where}: floor {got.floor} but tombstone {got.tombstone}")
        else:
            assert got.tombstone is None, f"{where}: tombstone {got.tombstone} without a floor"

    def _check_head(self, got, where: str) -> None:
        staged = max(self.max_staged, self.max_acked)
        if self.durability == "fsync":
            assert self.max_acked <= got.head <= staged, (
                f"{where}: head {got.head} not in [{self.max_acked}, {staged}]")
        elif self.durability == "disk":
            assert self.max_acked <= got.head <= staged + HEAD_RESERVE, (
                f"{where}: head {got.head} not in [{self.max_acked}, {staged}+256]")
        elif self.durability == "memory":
            assert got.head <= staged, f"{where}: head {got.head} above staged {staged}"

    def adopt(self, got) -> None:
        """After a verified recovery: what survived is the new truth (memory and disk may
        have lost a suffix; the head may have moved past a reservation)."""
        self.maybe_rows = {}
        self.deletes = []     # what they removed is absent from the adopted rows: a
                              # record coming back later is not in them, so it fails
        if got is None:
            if self.exists:
                self.exists = False
                self.reset()
            self.maybe_exists = False
            return
        if not self.exists:
            self.reset()
            self.exists, self.echo = True, got.config
        self.maybe_exists = False
        self.rows = dict(got.rows)
        self.next_seq = got.head + 1
        self.max_acked = max(self.max_acked, got.head) if self.durability in (
            "fsync", "disk") else got.head
        self.max_staged = max(self.max_staged, self.max_acked)
        self.hardened_upto = self.max_acked
        self.floor_seen = got.floor


@dataclasses.dataclass
class Recovered:
    """What a shard serves for one topic."""
    rows: dict
    head: int
    config: dict
    floor: int                  # the involuntary floor (tombstone gap_to from 0)
    tombstone: dict | None
