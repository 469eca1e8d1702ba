"""What a cluster crash run did and found: faults by kind, heal times, failures (a fault
that could not be done, a cluster that did not heal in time, a node that did not stop
cleanly), the writers' figures and the oracle's violations; the final report and verdict.

PASS needs both: the oracle holds (no violation) and nothing failed.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics


@dataclasses.dataclass
class TopicFigures:
    durability: str
    acked: int = 0              # acks received (a seq acked twice counts twice)
    failed: int = 0             # appends answered with an error or not at all: in doubt
    in_doubt_stored: int = 0    # of those, how many the final copies hold
    records: int = 0            # records in the final copy
    stored_twice: int = 0       # records of an acked write at another seq than its ack's
    errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class RunReport:
    seed: int
    minutes: float
    nodes: int
    shards: int
    faults: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    heal_s: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    failures: list = dataclasses.field(default_factory=list)
    violations: list = dataclasses.field(default_factory=list)
    topics: dict = dataclasses.field(default_factory=dict)       # name -> TopicFigures
    oracle_checked: bool = False
    elapsed_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.oracle_checked and not self.violations and not self.failures

    @property
    def verdict(self) -> str:
        if self.passed:
            return "PASS"
        reasons = []
        if self.violations:
            reasons.append(f"oracle violated ({len(self.violations)})")
        elif not self.oracle_checked:
            reasons.append("oracle not checked")
        if self.failures:
            reasons.append(f"{len(self.failures)} failures")
        return "FAIL: " + ", ".join(reasons)

    def final_lines(self) -> list[str]:
        total = sum(self.faults.values())
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items()))
        all_heals = [s for heals in self.heal_s.values() for s in heals]
        lines = [
            f"cluster crash test: seed {self.seed}, {self.minutes:g} min of faults, "
            f"{self.elapsed_s:.0f}s in all, {self.nodes} nodes x {self.shards} shards",
            f"faults: {total} ({kinds or 'none'})",
            f"heal time after a fault: {_spread(all_heals)}",
        ]
        lines += [f"  {kind}: {_spread(heals)}" for kind, heals in sorted(self.heal_s.items())]
        for name, fig in self.topics.items():
            errors = ", ".join(f"{code} {n}" for code, n in fig.errors.most_common())
            copy = (f"; {fig.in_doubt_stored} of them stored; final copy {fig.records} "
                    f"records, {fig.stored_twice} of them an acked write's second copy (a "
                    "retry after a failover)" if self.oracle_checked else "")
            lines.append(f"topic {name} ({fig.durability}): acked writes {fig.acked}, "
                         f"failed/in-doubt writes {fig.failed} ({errors or 'none'}){copy}")
        acked = sum(fig.acked for fig in self.topics.values())
        failed = sum(fig.failed for fig in self.topics.values())
        lines.append(f"acked writes {acked}, failed/in-doubt writes {failed}")
        lines += [f"FAILURE {line}" for line in self.failures[:50]]
        lines += [f"VIOLATION {line}" for line in self.violations[:100]]
        checked = ("checked: I1 every acked record at its seq with its payload on every "
                   "replica, I2 identical copies, no seq acked twice, nothing never sent"
                   if self.oracle_checked else "not checked")
        lines.append(f"oracle {checked}: {len(self.violations)} violations")
        lines.append(f"failures {len(self.failures)}; verdict: {self.verdict}")
        return lines


def _spread(values: list[float]) -> str:
    if not values:
        return "none"
    return (f"p50 {statistics.median(values):.1f}s, max {max(values):.1f}s "
            f"({len(values)} heals)")
