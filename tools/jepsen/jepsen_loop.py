"""The run: the cluster crash test's loop (faults one at a time at seeded random gaps, a
heal wait after each, the end) over a LabCluster, with the kinds drawn from a seeded deck
(each kind once per round, so a short run strikes every kind) and the oracle of oracle.py.
"""

from __future__ import annotations

import argparse

from tools.cluster_crashtest.fault_loop import FaultLoop
from tools.cluster_crashtest.run_report import TopicFigures
from tools.jepsen import nemesis, oracle
from tools.jepsen.lab_cluster import LabCluster
from tools.testing.cluster_harness import copies


class JepsenLoop(FaultLoop):
    def __init__(self, args: argparse.Namespace, cluster: LabCluster, out=print):
        super().__init__(args, cluster, out)
        self.faults = nemesis.FAULTS
        self.deck: list[str] = []
        self.struck = 0
        self.verdicts: dict[str, oracle.TopicVerdict] = {}

    def next_kind(self) -> str | None:
        if self.args.max_faults and self.struck >= self.args.max_faults:
            return None
        if not self.deck:
            self.deck = list(self.kinds)
            self.rng.shuffle(self.deck)
        self.struck += 1
        return self.deck.pop()

    def finish(self) -> None:
        hung = self.run.stop_readers()
        self.report.failures += [f"the reader of {topic} did not stop" for topic in hung]
        super().finish()

    def check_topic(self, topic: str, figures: TopicFigures) -> None:
        writer, reader = self.run.writers[topic], self.run.readers.get(topic)
        found = copies(self.run.nodes, self.args.shards, topic)
        acks = "leader" if topic in self.run.leader_acked else "all"
        verdict = oracle.check_topic(figures.durability, writer, reader, found,
                                     self.run.all_power_losses, acks)
        self.verdicts[topic] = verdict
        self.report.violations += [f"{topic}: {line}" for line in verdict.violations]
        figures.acked, figures.failed = len(writer.ack_log), writer.failures
        figures.errors, figures.records = writer.errors, verdict.records
        figures.stored_twice = verdict.retry_copies
        self.report.topics[topic] = figures
        lost = (f"{verdict.lost_leader_acked} acks=leader writes lost (allowed)"
                if acks == "leader" else f"{verdict.lost_allowed} lost to power losses of "
                "every node (allowed)")
        self.say(f"{topic} ({figures.durability}, acks={acks}): {verdict.records} records in "
                 f"the largest copy, {verdict.acked} acked, {verdict.reads} read, {lost}, "
                 f"{verdict.retry_copies} stored twice by a retry, violations "
                 f"{len(verdict.violations)}")


def last_line(loop: JepsenLoop) -> str:
    """`PASS: <N> acked writes, <F> faults (<kind> <count>, ...), 0 violations`, or
    `FAIL: ...` with the first violation (or the first failure: a fault that could not be
    done, a cluster that did not heal, the oracle not reached)."""
    report = loop.report
    acked = sum(fig.acked for topic, fig in report.topics.items()
                if topic not in loop.run.leader_acked)          # acks=all writes
    total = sum(report.faults.values())
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(report.faults.items()))
    head = (f"{acked} acked writes, {total} faults ({kinds or 'none'}), "
            f"{len(report.violations)} violations")
    if report.passed:
        return f"PASS: {head}"
    first = (report.violations[:1] or report.failures[:1] or ["the oracle did not run"])[0]
    return f"FAIL: {head}; first: {first}"

