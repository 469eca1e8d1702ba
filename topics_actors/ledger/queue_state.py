"""The lease state of one queue topic (spec/api.md 8), and how Lease frames change it.

A queue is a topic plus this state: the leases (seq -> node, lease id, deadline), how often
each job was delivered, a reclaim heap of seqs that became claimable again (expired leases,
nacks), the delayed set of nacked jobs waiting for their time, the claim cursor (the lowest
seq never handed out), the dead-letter counter and the lease-id counter.

It lives in the ledger, next to the topic's other state, because it is part of what the log
means: the live shard and a recovery (the shard's replay, and the compactor writing a
snapshot) apply the same Lease frames (spec/storage.md 1.3, type 10) through apply_frame,
so they agree on which jobs are held, by whom, until when. Lease events: 0 claimed, 1
released (nack; deadline = when it is ready again, 0 = now), 2 extended, 3 acked, 4
dead-lettered and 5 moving (ours: the job moved to the dead-letter topic; on its way to
a dead-letter topic in another shard, held by the queue's shard until that append is
acknowledged). Acked and dead-lettered jobs
leave the queue: the caller deletes the record through the delete rules (ledger/
delete_rules.delete_seqs), so count, bytes and reads agree and the delete survives a crash.

Which frames exist: acks and dead-letter moves (moving, dead-lettered) are always logged
(with the topic's class),
since a job acked must never come back; claims, nacks and extends only when the topic has
`leases_durable`. Without it, leases are memory-only: after a restart every un-acked job
is claimable again, deliveries start over. Lease expiry is never logged: it is a function of
the clock (sweep), replayed leases keep their deadlines.

The snapshot form (to_entry / from_entry) carries what a recovery needs once the WAL files
holding the Lease frames are gone: leases and delayed jobs with their deadlines, the
delivery counts, the jobs moving to a dead-letter topic, the dead-letter counter and the
lease-id counter (so a lease id is never
issued twice, which keeps fencing sound across restarts). The reclaim heap and the claim
cursor are not kept: after a restore the cursor starts at the topic's first live seq and
skips held and delayed jobs, which hands out the same set of jobs.

Pure: no I/O; `now` is passed in (the shard's injectable clock).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterator

from topics_actors.errors import InvariantViolation
from topics_actors.ledger.delete_rules import live_floor
from topics_actors.ledger.topic_state import TopicState

CLAIMED, RELEASED, EXTENDED, ACKED, DEAD_LETTERED, MOVING = 0, 1, 2, 3, 4, 5
LEASE_PREFIX = "lease_"
_LEASE_ID = re.compile(LEASE_PREFIX + "[0-9a-fA-F]{1,16}")   # ASCII hex only (\d is wider)

Live = Callable[[int], bool]      # whether a job (seq) still exists


def render_lease_id(lease_id: int) -> str:
    return f"{LEASE_PREFIX}{lease_id:x}"


def parse_lease_id(text: str) -> int | None:
    """The number of a `lease_<hex>` id; None for "" (no fence). ValueError if malformed."""
    if text == "":
        return None
    if _LEASE_ID.fullmatch(text) is None:
        raise ValueError(f"lease id {text!r} is not lease_<hex>")
    return int(text[len(LEASE_PREFIX):], 16)


class Lease:
    """Who holds a job until when; `size` is the job's payload bytes when its claim read it
    (-1: not known, a lease from the log), so its ack need not read the record again."""
    __slots__ = ("node", "lease_id", "deadline", "size")

    def __init__(self, node: str, lease_id: int, deadline: int, size: int = -1):
        self.node, self.lease_id, self.deadline, self.size = node, lease_id, deadline, size

    def held_by(self, node: str, fence: int | None) -> bool:
        return self.node == node and (fence is None or fence == self.lease_id)


class QueueState:
    def __init__(self):
        self.leases: dict[int, Lease] = {}
        self.deliveries: dict[int, int] = {}
        self.reclaim: list[int] = []                    # min-heap of seqs (may hold stale)
        self.delayed: dict[int, int] = {}               # seq -> ready_at ms
        self.delayed_heap: list[tuple[int, int]] = []   # (ready_at, seq) (may hold stale)
        self.expiries: list[tuple[int, int, int]] = []  # (deadline, seq, lease id), ditto
        self.moving: set[int] = set()                   # on their way to a dead-letter topic
        self.leaving: set[int] = set()      # acked in the batch being built, deleted at commit
        self.cursor = 1
        self.dead_lettered = 0
        self.next_lease_id = 1

    # --- time -----------------------------------------------------------------------------

    def sweep(self, now: int) -> None:
        """Delayed jobs whose time came and leases past their deadline become claimable."""
        delayed, heap = self.delayed, self.delayed_heap
        while heap and heap[0][0] <= now:
            ready_at, seq = heapq.heappop(heap)
            if delayed.get(seq) == ready_at:
                del delayed[seq]
                heapq.heappush(self.reclaim, seq)
        expiries, leases = self.expiries, self.leases
        if len(expiries) > 2 * len(leases) + 64:   # entries of acked or extended leases
            expiries = self.expiries = [(lease.deadline, seq, lease.lease_id)
                                        for seq, lease in leases.items()]
            heapq.heapify(expiries)
        while expiries and expiries[0][0] < now:
            deadline, seq, lease_id = heapq.heappop(expiries)
            lease = leases.get(seq)
            if lease is not None and lease.lease_id == lease_id and lease.deadline < now:
                del leases[seq]
                heapq.heappush(self.reclaim, seq)

    # --- claiming -------------------------------------------------------------------------

    def candidates(self, head: int, live: Live) -> Iterator[int]:
        """Claimable seqs, lowest reclaimed first, then from the cursor up to `head`. Taking
        a seq from the iterator takes it out of the ready set (give_back puts it back)."""
        while self.reclaim:
            seq = heapq.heappop(self.reclaim)
            if self._ready(seq) and live(seq):
                yield seq
        while self.cursor <= head:
            seq = self.cursor
            self.cursor += 1
            if self._ready(seq) and live(seq):
                yield seq

    def _ready(self, seq: int) -> bool:
        return (seq not in self.leases and seq not in self.delayed and seq not in self.moving
                and seq not in self.leaving)

    def give_back(self, seq: int) -> None:
        heapq.heappush(self.reclaim, seq)

    def lease(self, seq: int, node: str, deadline: int, lease_id: int | None = None,
              size: int = -1) -> Lease:
        """Lease `seq` to `node` (one more delivery); a new lease id unless given."""
        if seq < 1:
            raise InvariantViolation(f"a lease of seq {seq}, which no record can have")
        if lease_id is None:
            lease_id = self.next_lease_id
        self.next_lease_id = max(self.next_lease_id, lease_id + 1)
        lease = self.leases[seq] = Lease(node, lease_id, deadline, size)
        self.deliveries[seq] = self.deliveries.get(seq, 0) + 1
        heapq.heappush(self.expiries, (deadline, seq, lease_id))
        return lease

    def unlease(self, seq: int, lease: Lease) -> None:
        """Undo lease(): the staged claim did not commit."""
        if self.leases.get(seq) is lease:
            del self.leases[seq]
        count = self.deliveries.get(seq, 0) - 1
        if count > 0:
            self.deliveries[seq] = count
        else:
            self.deliveries.pop(seq, None)
        self.give_back(seq)

    # --- holders' operations --------------------------------------------------------------

    def held(self, seq: int, node: str, fence: int | None) -> Lease | None:
        lease = self.leases.get(seq)
        return lease if lease is not None and lease.held_by(node, fence) else None

    def drop(self, seq: int) -> Lease | None:
        """The job leaves the queue (acked, dead-lettered, deleted): forget it."""
        self.deliveries.pop(seq, None)
        self.delayed.pop(seq, None)
        self.moving.discard(seq)
        return self.leases.pop(seq, None)

    def leave(self, seq: int) -> Lease | None:
        """Acked in the batch being built: forget it, and keep it out of the ready set until
        the commit deletes its record (left) or the batch is undone (restore); a claim in the
        same batch would otherwise still find the record and hand it out again."""
        self.leaving.add(seq)
        return self.drop(seq)

    def left(self, seqs) -> None:
        self.leaving.difference_update(seqs)

    def move(self, seq: int) -> None:
        """The job goes to a dead-letter topic in another shard: out of the ready set until
        that append is acknowledged (then drop), or the staging is undone (give_back)."""
        self.leases.pop(seq, None)
        self.delayed.pop(seq, None)
        self.moving.add(seq)

    def release(self, seq: int, ready_at: int) -> None:
        """Drop the lease; the job is claimable now (ready_at 0) or at ready_at."""
        self.leases.pop(seq, None)
        if ready_at:
            self.delayed[seq] = ready_at
            heapq.heappush(self.delayed_heap, (ready_at, seq))
        else:
            self.delayed.pop(seq, None)
            heapq.heappush(self.reclaim, seq)

    def restore(self, seq: int, lease: Lease) -> None:
        """Undo an ack, nack or extend that did not commit: the lease stands as it was."""
        self.delayed.pop(seq, None)
        self.leaving.discard(seq)
        self.leases[seq] = lease
        heapq.heappush(self.expiries, (lease.deadline, seq, lease.lease_id))

    def extend(self, seq: int, lease: Lease, deadline: int) -> None:
        self.leases[seq] = Lease(lease.node, lease.lease_id, deadline, lease.size)
        heapq.heappush(self.expiries, (deadline, seq, lease.lease_id))

    def prune(self, count: int, live: Live) -> None:
        """Forget jobs that are gone (retention, deletes) once they outnumber the live ones:
        amortized, the state stays proportional to the queue."""
        if len(self.deliveries) + len(self.leases) <= 2 * count + 64:
            return
        self.deliveries = {seq: n for seq, n in self.deliveries.items() if live(seq)}
        self.leases = {seq: lease for seq, lease in self.leases.items() if live(seq)}
        self.delayed = {seq: at for seq, at in self.delayed.items() if live(seq)}

    # --- counters -------------------------------------------------------------------------

    def counters(self, count: int, live: Live) -> dict:
        """`queue` of a GET (call after sweep): in_flight = leases on live jobs; ready =
        live jobs neither leased, waiting for their delay, moving nor acked in the batch
        being committed (their records are deleted as the batch's answers run, so the figures
        stay the same through one commit's answers)."""
        in_flight = sum(1 for seq in self.leases if live(seq))
        waiting = sum(1 for seq in self.delayed if live(seq))
        waiting += sum(1 for seq in self.moving if live(seq))
        waiting += sum(1 for seq in self.leaving if live(seq))   # acked, deleted at commit
        return {"ready": max(0, count - in_flight - waiting), "in_flight": in_flight,
                "dead_lettered": self.dead_lettered}

    # --- the log --------------------------------------------------------------------------

    def apply_frame(self, seq: int, event: int, lease_id: int, deadline: int,
                    deliveries: int, node: str, durable: bool) -> bool:
        """Apply one logged Lease event to job `seq` (replay and compactor). Returns whether
        the job left the queue (its record is to be deleted). Claims, nacks and extends
        count only while the topic keeps durable leases."""
        self.next_lease_id = max(self.next_lease_id, lease_id + 1)
        if event in (ACKED, DEAD_LETTERED):
            self.drop(seq)
            self.dead_lettered += event == DEAD_LETTERED
            return True
        if event == MOVING:
            self.move(seq)
            return False
        if not durable:
            return False
        if event == CLAIMED:
            self.delayed.pop(seq, None)
            self.leases[seq] = Lease(node, lease_id, deadline)
            self.deliveries[seq] = deliveries
            heapq.heappush(self.expiries, (deadline, seq, lease_id))
        elif event == RELEASED:
            self.release(seq, deadline)
        elif event == EXTENDED and seq in self.leases:
            self.extend(seq, self.leases[seq], deadline)
        return False

    def to_entry(self, durable: bool, live: Live) -> dict:
        """The snapshot form (see the module docstring); leases only when durable."""
        entry = {"dead_lettered": self.dead_lettered, "next_lease_id": self.next_lease_id,
                 "moving": sorted(self.moving)}
        if durable:
            entry["leases"] = [[seq, lease.node, lease.lease_id, lease.deadline]
                               for seq, lease in self.leases.items() if live(seq)]
            entry["deliveries"] = [[seq, n] for seq, n in self.deliveries.items() if live(seq)]
            entry["delayed"] = [[seq, at] for seq, at in self.delayed.items() if live(seq)]
        return entry

    @classmethod
    def from_entry(cls, entry: dict) -> "QueueState":
        state = cls()
        state.dead_lettered = entry.get("dead_lettered", 0)
        state.next_lease_id = entry.get("next_lease_id", 1)
        state.moving = set(entry.get("moving", ()))
        for seq, node, lease_id, deadline in entry.get("leases", ()):
            state.leases[seq] = Lease(node, lease_id, deadline)
            state.expiries.append((deadline, seq, lease_id))
        heapq.heapify(state.expiries)
        state.deliveries = {seq: n for seq, n in entry.get("deliveries", ())}
        for seq, ready_at in entry.get("delayed", ()):
            state.delayed[seq] = ready_at
            state.delayed_heap.append((ready_at, seq))
        heapq.heapify(state.delayed_heap)
        return state


def queue_of(topic: TopicState) -> QueueState:
    """The lease state of a queue topic (created on first use)."""
    if topic.queue is None:
        topic.queue = QueueState()
    return topic.queue


def live_jobs(topic: TopicState, read, records: dict | None = None) -> Live:
    """Whether a seq of `topic` is a job still there; `read(topic, seq)` gives its record,
    kept in `records` (seq -> record) when given."""
    floor = live_floor(topic)
    if records is None:
        return lambda seq: floor < seq <= topic.head and read(topic, seq) is not None

    def live(seq: int) -> bool:
        record = read(topic, seq) if floor < seq <= topic.head else None
        if record is None:
            return False
        records[seq] = record
        return True
    return live


def known_jobs(topic: TopicState) -> Live:
    """Whether a job the lease state knows is still there, without reading it: a floor
    did not pass it and it was not deleted since (the shard notes every delete in
    `deleted`)."""
    floor, deleted = live_floor(topic), topic.deleted
    return lambda seq: floor < seq <= topic.head and seq not in deleted


def counters(topic: TopicState, now: int) -> dict:
    """The `queue` member of a queue topic's GET."""
    state = queue_of(topic)
    state.sweep(now)
    return state.counters(topic.count, known_jobs(topic))
