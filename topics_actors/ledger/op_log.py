"""A replicated topic's log of record deletes and queue lease events (docs/CLUSTER.md): the
operations that change records already written, replicated beside the records and applied
only once committed.

A delete cannot be undone, so no replica applies one before every in-sync replica holds it
(its op is committed); an op that a failover leaves behind was never applied anywhere and
is simply dropped. Ops are numbered from 1 by the leader and carry its leader epoch. A
replica keeps the ops not yet applied (`pending`, in its WAL as REPL_OP frames, which
storage/frame_body.py encodes, and in its snapshot), the number of the last one applied
(`applied`, an OPS_COMMIT frame logged with the Delete frames that apply it), and a bounded
tail of applied ops (`recent`) to send to followers that are behind. Deletes commute and
are idempotent, so replicas that applied the same set of ops hold the same records.

An op is ["delete", before_seq | None, [match op, value] | None, bound]: the delete of
spec/api.md 5.7 over the seqs below `bound`, which never passes the leader's high
watermark (a record a failover may still replace is never named by a delete); or
["seqs", [seq, ...]]: a queue's acked jobs, deleted by seq; or ["leases", [[seq, event,
lease_id, deadline, deliveries, node], ...]]: a queue's lease events (the fields of a Lease
frame, ledger/queue_state.py) when it keeps `leases_durable`.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

from topics_actors.errors import InvariantViolation

RECENT_MAX = 4_096


class Op(NamedTuple):
    no: int
    epoch: int
    body: list


def bound_of(body: list) -> int:
    """The log end a replica needs before it can apply the op."""
    if body[0] == "delete":
        return body[3]
    if body[0] == "leases":
        return max(event[0] for event in body[1]) + 1
    return max(body[1]) + 1


class OpLog:
    def __init__(self, applied: int = 0, pending: list[Op] | None = None):
        self.applied = applied
        self.pending: list[Op] = list(pending or ())
        self.recent: collections.deque[Op] = collections.deque(maxlen=RECENT_MAX)

    @property
    def leo(self) -> int:
        """The number the next op gets."""
        return (self.pending[-1].no if self.pending else self.applied) + 1

    def append(self, op: Op) -> None:
        if op.no != self.leo:
            raise InvariantViolation(f"op {op.no} appended at op log end {self.leo}")
        self.pending.append(op)

    def take_committed(self, upto: int) -> list[Op]:
        """Pending ops numbered up to `upto`, now applied (oldest first). With nothing
        pending, `upto` is where a fresh copy's ops start (its records already show every
        op the leader had applied)."""
        done = [op for op in self.pending if op.no <= upto]
        if self.pending and upto >= self.leo:
            raise InvariantViolation(f"ops committed up to {upto}, past the op log end "
                                     f"{self.leo}")
        if done:
            self.pending = self.pending[len(done):]
            self.recent.extend(done)
        if done or not self.pending:
            self.applied = max(self.applied, upto)
        return done

    def snapshot(self) -> tuple[int, list[Op], list[Op]]:
        """How the log stands now, for restore() when a batch that changed it fails."""
        return self.applied, list(self.pending), list(self.recent)

    def restore(self, state: tuple[int, list[Op], list[Op]]) -> None:
        self.applied, pending, recent = state
        self.pending = list(pending)
        self.recent.clear()
        self.recent.extend(recent)

    @property
    def pending_epoch(self) -> int | None:
        """The epoch of the newest op not applied (the only ops that can diverge)."""
        return self.pending[-1].epoch if self.pending else None

    def drop_pending(self) -> int:
        """Forget the ops not applied (a new leader never had them): how many went."""
        count, self.pending = len(self.pending), []
        return count

    def since(self, first: int, limit: int) -> list[Op] | None:
        """Ops numbered from `first` on (at most `limit`), None when the oldest of them is
        no longer kept here."""
        if first >= self.leo:
            return []
        held = list(self.recent) + self.pending
        if not held or held[0].no > first:
            return None
        start = first - held[0].no
        return held[start:start + limit]

    def epoch_of(self, no: int) -> int | None:
        for op in reversed(list(self.recent) + self.pending):
            if op.no == no:
                return op.epoch
        return None

    def to_entry(self) -> dict:
        return {"applied": self.applied,
                "pending": [[op.no, op.epoch, op.body] for op in self.pending]}

    @classmethod
    def from_entry(cls, entry: dict) -> "OpLog":
        return cls(entry["applied"], [Op(no, epoch, list(body))
                                      for no, epoch, body in entry["pending"]])
