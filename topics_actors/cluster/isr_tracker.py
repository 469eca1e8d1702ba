"""The leader's view of one replicated topic: how far each follower has durably copied the
log, which replicas are in sync, the high watermark, and the writes waiting for it.

Rules (Liftbridge/Kafka, with Kafka's later fixes):
- HW = the smallest durable leo over the in-sync replicas (the leader's own included), and
  it advances only while the ISR has at least `min_isr` members; it never goes back.
- A follower is caught up when its fetch reached the leader's leo as it was at the previous
  fetch, so a steady stream of writes does not make the ISR flap.
- Shrink: a follower not caught up for `lag_time_ms`. Expand: a replica at or past the HW
  and the current epoch's start, holding every committed op (deletes and acks commit over
  the ISR too), and, while the ISR is below `min_isr`, at the leader's leo (KAFKA-19996).
  An ISR change is only proposed here; it takes effect when the leader has written it to
  ZooKeeper (`isr_written`). Meanwhile the HW counts a joining replica at once and a
  leaving one until the write lands (KIP-497's maximal ISR): both err towards a lower HW.
- Time is the caller's monotonic clock in ms.
"""

from __future__ import annotations

import dataclasses
import heapq

from topics_actors.errors import ErrorCode, InvariantViolation, TopicsError


@dataclasses.dataclass
class FollowerProgress:
    leo: int = 0                     # its durable log end as its fetches report it; 0: none yet
    last_fetch_ms: int = 0
    caught_up_ms: int = 0
    leader_leo_then: int = 1         # the leader's leo when its previous fetch was answered
    ops_leo: int = 0                 # its durable op log end (ledger/op_log.py); 0: none yet


class IsrTracker:
    def __init__(self, leader: str, replicas: tuple[str, ...], isr: tuple[str, ...],
                 min_isr: int, lag_time_ms: int, epoch_start_leo: int, leader_leo: int,
                 hw_leo: int, now_ms: int, leader_epoch: int = 0):
        self.leader, self.replicas, self.isr = leader, replicas, isr
        self.leader_epoch = leader_epoch
        self.min_isr, self.lag_time_ms = min_isr, lag_time_ms
        self.epoch_start_leo = epoch_start_leo
        self.leader_leo, self.hw_leo = leader_leo, hw_leo
        self.proposed: tuple[str, ...] | None = None
        self.leader_ops_leo = self.ops_hw_leo = 1     # the op log's, as for records
        # A new leader gives every follower a full lag window before judging it.
        self.followers = {node: FollowerProgress(caught_up_ms=now_ms, last_fetch_ms=now_ms)
                          for node in replicas if node != leader}

    def set_replicas(self, replicas: tuple[str, ...], now_ms: int) -> None:
        """The replica set changed in this epoch (a move, cluster/reassignment.py): a new
        replica is counted from its first fetch, with a full lag window; one that left is
        forgotten (it is out of the ISR first)."""
        self.replicas = replicas
        for node in replicas:
            if node != self.leader and node not in self.followers:
                self.followers[node] = FollowerProgress(caught_up_ms=now_ms,
                                                        last_fetch_ms=now_ms)
        for node in [n for n in self.followers if n not in replicas]:
            del self.followers[node]
        if self.proposed is not None:
            self.proposed = tuple(n for n in self.proposed if n in replicas)

    @property
    def hw_seq(self) -> int:
        """The highest seq readers may see."""
        return self.hw_leo - 1

    def can_ack_all(self) -> bool:
        return len(self.isr) >= self.min_isr

    def require_min_isr(self, what: str) -> None:
        """Raise not_enough_replicas unless `what` (an `acks: all` write, a replicated
        delete or ack) can be committed: at least min_isr replicas in sync."""
        if not self.can_ack_all():
            raise TopicsError(f"{len(self.isr)} of the {self.min_isr} in-sync replicas {what} "
                              f"needs are in sync", ErrorCode.NOT_ENOUGH_REPLICAS,
                              {"isr": list(self.isr), "min_isr": self.min_isr})

    def leader_committed(self, leo: int) -> bool:
        """The leader's own log is durable up to `leo`; whether the HW moved."""
        self.leader_leo = max(self.leader_leo, leo)
        return self._advance()

    def fetched(self, node: str, fetch_leo: int, now_ms: int) -> bool:
        """A follower's fetch from `fetch_leo` (its durable leo); whether the HW moved."""
        progress = self.followers.get(node)
        if progress is None:
            return False                   # not a replica of this topic: ignored
        if fetch_leo >= self.leader_leo:
            progress.caught_up_ms = now_ms
        elif fetch_leo >= progress.leader_leo_then:
            progress.caught_up_ms = max(progress.caught_up_ms, progress.last_fetch_ms)
        progress.leo = fetch_leo
        progress.last_fetch_ms = now_ms
        progress.leader_leo_then = self.leader_leo
        return self._advance()

    @property
    def ops_hw(self) -> int:
        """The highest op committed: every in-sync replica holds it durably."""
        return self.ops_hw_leo - 1

    def start_ops(self, leader_ops_leo: int, applied: int) -> None:
        """The leader's own op log end and the ops already applied (committed before)."""
        self.leader_ops_leo, self.ops_hw_leo = leader_ops_leo, applied + 1

    def leader_ops_durable(self, ops_leo: int) -> bool:
        """The leader's own op log is durable up to `ops_leo`; whether ops committed."""
        self.leader_ops_leo = max(self.leader_ops_leo, ops_leo)
        return self._advance_ops()

    def ops_fetched(self, node: str, ops_leo: int) -> bool:
        progress = self.followers.get(node)
        if progress is None:
            return False
        progress.ops_leo = ops_leo
        return self._advance_ops()

    def _advance_ops(self) -> bool:
        """Ops commit like records: on every counted in-sync replica, with min_isr in sync."""
        if len(self.isr) < self.min_isr:
            return False
        candidate = min([self.leader_ops_leo] + [self.followers[n].ops_leo
                                                 for n in self._counted() if n != self.leader])
        if candidate <= self.ops_hw_leo:
            return False
        self.ops_hw_leo = candidate
        return True

    def _counted(self) -> set[str]:
        return set(self.isr) | set(self.proposed or ())

    def _advance(self) -> bool:
        if len(self.isr) < self.min_isr:
            return False
        leos = [self.leader_leo] + [self.followers[n].leo for n in self._counted()
                                    if n != self.leader]
        candidate = min(leos)
        if candidate <= self.hw_leo:
            return False
        self._check_covered(candidate)
        self.hw_leo = candidate
        return True

    def _check_covered(self, hw_leo: int) -> None:
        """The HW never passes the durable end of a replica ZooKeeper lists in sync (any of
        them may be elected and would lack acked records), nor the leader's own. Checked
        over the ISR as written, apart from how the candidate was counted."""
        short = {n: self.followers[n].leo for n in self.isr if n != self.leader
                 and self.followers[n].leo < hw_leo}
        if short or self.leader_leo < hw_leo:
            raise InvariantViolation(f"the high watermark would reach leo {hw_leo}, past the "
                                     f"durable end of in-sync replicas {short} (the leader's "
                                     f"is {self.leader_leo})")

    def proposal(self, now_ms: int) -> tuple[str, ...] | None:
        """The ISR to write to ZooKeeper, None if it should stay as it is."""
        wanted = {self.leader}
        for node, progress in self.followers.items():
            if node in self.isr:
                if now_ms - progress.caught_up_ms <= self.lag_time_ms:
                    wanted.add(node)
            elif self._may_join(progress):
                wanted.add(node)
        ordered = tuple(n for n in self.replicas if n in wanted)
        if ordered == self.isr:
            self.proposed = None
            return None
        self.proposed = ordered
        return ordered

    def _may_join(self, progress: FollowerProgress) -> bool:
        """A replica joins holding every committed record and every committed op: one
        that lacked an op committed while it was out (a delete, an ack the leader applied
        and answered) could be elected and serve the deleted records, the acked jobs."""
        if progress.leo < max(self.hw_leo, self.epoch_start_leo):
            return False
        if progress.ops_leo < self.ops_hw_leo:
            return False
        return len(self.isr) >= self.min_isr or progress.leo >= self.leader_leo

    def isr_written(self, isr: tuple[str, ...]) -> bool:
        """ZooKeeper took the ISR change; whether the HW moved."""
        self.isr, self.proposed = isr, None
        self._advance_ops()
        return self._advance()


class AckWaiters:
    """Writes acknowledged with `acks: all`, each waiting for the HW to cover its last seq."""

    def __init__(self, max_waiting: int):
        self.max_waiting = max_waiting
        self._heap: list[tuple[int, int, object]] = []
        self._order = 0

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, last_seq: int, waiter: object) -> bool:
        """False when full (the caller answers `throttled` instead of queueing)."""
        if len(self._heap) >= self.max_waiting:
            return False
        self._order += 1
        heapq.heappush(self._heap, (last_seq, self._order, waiter))
        return True

    def released(self, hw_seq: int) -> list[object]:
        done = []
        while self._heap and self._heap[0][0] <= hw_seq:
            done.append(heapq.heappop(self._heap)[2])
        return done

    def drain(self) -> list[object]:
        """Every waiter (leadership lost: they are answered "in doubt")."""
        done = [entry[2] for entry in sorted(self._heap)]
        self._heap.clear()
        return done
