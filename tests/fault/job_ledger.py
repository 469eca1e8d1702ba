"""The oracle of the queue kill tests: every delivery and every ack outcome workers saw,
the outages the test caused, and the rules a queue must keep across them.

Times are time.monotonic() in the test process. A delivery's `after_s` is when the claim
that returned it was sent (an SSE job: when the event arrived); an ack's `sent_s` is when
its first attempt left and `recv_s` when its definite answer came back (retries between).

Why a `skipped` ack can be legitimate: a worker's ack may commit and the shard (or the
gateway) die before the answer leaves; the retry then finds the job gone and lists it in
`skipped`. The client cannot tell that from a lost lease, so a skipped ack must be
explained by an outage overlapping its flight, or by its lease having run out; with
memory-only leases, by any outage between the claim and the ack's answer (the lease was
dropped by the restart). A job whose only acks were skipped must never be handed out after
them: then the skipped ack was the committed one.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import NamedTuple


class Delivery(NamedTuple):
    seq: int
    lease_id: str
    deliveries: int
    deadline_ms: int
    after_s: float
    worker: str


class AckOutcome(NamedTuple):
    seq: int
    lease_id: str
    acked: bool
    sent_s: float
    recv_s: float
    recv_wall_ms: int
    worker: str


class Outage(NamedTuple):
    killed_s: float
    back_s: float


class JobLedger:
    def __init__(self, durable_leases: bool):
        self.durable_leases = durable_leases
        self.lock = threading.Lock()
        self.deliveries: dict[int, list[Delivery]] = {}
        self.acks: list[AckOutcome] = []
        self.outages: list[Outage] = []

    def delivered(self, jobs: list[dict], after_s: float, worker: str) -> None:
        with self.lock:
            for job in jobs:
                self.deliveries.setdefault(job["$seq"], []).append(Delivery(
                    job["$seq"], job["lease_id"], job["deliveries"], job["deadline"],
                    after_s, worker))

    def answered(self, jobs: list[dict], reply: dict, sent_s: float, worker: str) -> None:
        """An ack's definite reply for `jobs` (the dicts the claim returned)."""
        recv_s, wall_ms = time.monotonic(), int(time.time() * 1000)
        acked = set(reply["acked_seqs"])
        with self.lock:
            for job in jobs:
                self.acks.append(AckOutcome(job["$seq"], job["lease_id"], job["$seq"] in acked,
                                            sent_s, recv_s, wall_ms, worker))

    def outage(self, killed_s: float, back_s: float) -> None:
        with self.lock:
            self.outages.append(Outage(killed_s, back_s))

    @property
    def acked_count(self) -> int:
        with self.lock:
            return sum(a.acked for a in self.acks)

    # --- the rules ----------------------------------------------------------------------------

    def violations(self, jobs: set[int]) -> list[str]:
        """Every broken rule, given the seqs whose appends were acked; the caller checks
        separately that the queue is empty."""
        out = []
        acked = Counter(a.seq for a in self.acks if a.acked)
        out += [f"job {seq} acked successfully {n} times: {self.story(seq)}"
                for seq, n in acked.items() if n > 1]
        out += [f"job {seq} acked but never appended" for seq in acked if seq not in jobs]
        for ack in self.acks:
            if ack.acked:
                out += self._handed_out_after(ack, "acked")
            elif not self._explained(ack):
                out.append(f"job {ack.seq}: ack of {ack.lease_id} by {ack.worker} skipped "
                           "with no outage or expiry to explain it (lost lease)")
        for seq in sorted(jobs):
            if seq not in self.deliveries:
                out.append(f"job {seq} appended (acked) but never delivered")
            elif not acked[seq]:
                skipped = [a for a in self.acks if a.seq == seq]
                if not skipped:
                    out.append(f"job {seq} delivered but never acked")
                for ack in skipped:
                    out += self._handed_out_after(ack, "skipped (committed before the crash?)")
        if self.durable_leases:
            out += self._deliveries_distinct()
        return out

    def story(self, seq: int) -> str:
        """What happened to one job, for a failure message."""
        events = [(d.after_s, f"delivered to {d.worker} ({d.lease_id}, #{d.deliveries})")
                  for d in self.deliveries.get(seq, ())]
        events += [(a.recv_s, f"ack {'acked' if a.acked else 'skipped'} by {a.worker} "
                    f"(sent {a.sent_s:.3f})") for a in self.acks if a.seq == seq]
        events += [(o.killed_s, f"killed (back {o.back_s:.3f})") for o in self.outages]
        return "; ".join(f"{t:.3f} {what}" for t, what in sorted(events))

    def _handed_out_after(self, ack: AckOutcome, what: str) -> list[str]:
        return [f"job {ack.seq} {what} at {ack.recv_s:.3f} by {ack.worker}, handed out again "
                f"to {d.worker} by a claim sent at {d.after_s:.3f}"
                for d in self.deliveries.get(ack.seq, ()) if d.after_s > ack.recv_s]

    def _explained(self, ack: AckOutcome) -> bool:
        delivery = next((d for d in self.deliveries.get(ack.seq, ())
                         if d.lease_id == ack.lease_id), None)
        if delivery is not None and ack.recv_wall_ms >= delivery.deadline_ms:
            return True                          # the lease ran out
        start = ack.sent_s
        if not self.durable_leases and delivery is not None:
            start = delivery.after_s             # a restart dropped the lease
        return any(o.killed_s <= ack.recv_s and start <= o.back_s for o in self.outages)

    def _deliveries_distinct(self) -> list[str]:
        """Durable leases keep delivery counts, so no two hand-outs of a job share one
        (claims crossing an outage may be answered out of their sending order)."""
        out = []
        for seq, seen in self.deliveries.items():
            counts = Counter(d.deliveries for d in seen)
            out += [f"job {seq} handed out {n} times with delivery count {c}"
                    for c, n in counts.items() if n > 1]
        return out
