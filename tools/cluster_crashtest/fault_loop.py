"""The loop: faults one at a time at seeded random intervals, a wait for the cluster to heal
after each, then the end: writers stopped, followers caught up, nodes stopped, and the
oracle checked on every node's copy of every topic.

Healed means: every node ready, connected to ZooKeeper, seeing every node registered and
every topic led with its whole ISR (cluster_harness.cluster_unhealed), and every writer
acked a write after the fault ended. Not healed within --heal-timeout-s is a failure; the
loop then waits twice as long again, and if the cluster still has not healed it stops
striking and goes to the end.
"""

from __future__ import annotations

import argparse
import random
import time

import orjson

from tools.cluster_crashtest.cluster_run import ClusterRun
from tools.cluster_crashtest.fault_table import FAULTS
from tools.cluster_crashtest.run_report import RunReport, TopicFigures
from tools.testing.cluster_harness import (
    acked_violations, cluster_unhealed, cluster_view, copies, wait_caught_up,
)
from topics_actors.errors import TopicsError

POLL_S = 0.25
STUCK_FACTOR = 2        # after a heal timeout, wait this many timeouts more before giving up


class FaultLoop:
    def __init__(self, args: argparse.Namespace, run: ClusterRun, out=print):
        self.args, self.run, self.out = args, run, out
        self.rng = random.Random(args.seed)
        self.kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
        self.faults = FAULTS             # kind -> fault(run, rng) -> detail line
        self.report = RunReport(args.seed, args.minutes, args.nodes, args.shards)
        self.started = time.monotonic()

    def say(self, line: str) -> None:
        self.out(f"[{time.monotonic() - self.started:7.1f}s] {line}")

    def execute(self) -> RunReport:
        """Start the cluster, strike until the time is up, check. The caller closes the
        run (cleanup) whatever happens."""
        self.say(f"starting ZooKeeper and {self.args.nodes} nodes in {self.run.base}")
        self.run.start()
        self.say(f"cluster up: topics {', '.join(self.run.topics)}, writers through "
                 + ", ".join(f"{t}->{self.run.writer_entry(t)}" for t in self.run.topics))
        deadline = time.monotonic() + self.args.minutes * 60     # of faults, after set-up
        number = 0
        while True:
            gap_s = self.rng.uniform(self.args.gap_min_s, self.args.gap_max_s)
            if time.monotonic() + gap_s >= deadline:
                break
            time.sleep(gap_s)
            number += 1
            kind = self.next_kind()
            if kind is None:
                break
            if not self.strike(number, kind):
                self.say("the cluster did not heal: no more faults")
                break
        self.finish()
        self.report.elapsed_s = time.monotonic() - self.started
        return self.report

    def next_kind(self) -> str | None:
        """The next fault's kind (None: strike no more)."""
        return self.rng.choice(self.kinds)

    def strike(self, number: int, kind: str) -> bool:
        """One fault and the heal wait; False if the cluster is stuck."""
        self.say(f"fault {number}: {kind} ...")
        leaders_before = self.leaders()
        try:
            detail = self.faults[kind](self.run, self.rng)
        except (AssertionError, RuntimeError, TopicsError, OSError) as error:
            detail = f"could not be done: {error}"
            self.report.failures.append(f"fault {number} {kind}: {error}")
        self.report.faults[kind] += 1
        ended = time.monotonic()
        healed_s = self.wait_healed(ended, f"fault {number} {kind}")
        if healed_s is not None:
            self.report.heal_s[kind].append(healed_s)
        acked = sum(len(w.ack_log) for w in self.run.writers.values())
        failed = sum(w.failures for w in self.run.writers.values())
        heal = f"healed in {healed_s:.1f}s" if healed_s is not None else "NOT HEALED"
        after = self.leaders()
        moves = ", ".join(f"{t} {leader}" + (f"->{after.get(t)}" if after.get(t) != leader
                                              else "") for t, leader in leaders_before.items())
        self.say(f"fault {number}: {kind} {detail}; {heal}; leaders {moves} | acked {acked}, "
                 f"failed writes {failed}, failures {len(self.report.failures)}")
        return healed_s is not None

    def wait_healed(self, since: float, what: str, writes: bool = True) -> float | None:
        """Seconds from `since` until healed; a failure past the heal timeout; None if it
        did not heal in STUCK_FACTOR more timeouts either."""
        timeout_s, reported = self.args.heal_timeout_s, False
        while True:
            missing = self.unhealed(since if writes else None)
            waited = time.monotonic() - since
            if missing is None:
                return waited
            if waited > timeout_s and not reported:
                reported = True
                self.report.failures.append(f"{what}: not healed after {timeout_s:g}s: "
                                            f"{missing}")
                self.say(f"HEAL TIMEOUT {what}: {missing}; waiting longer")
            if waited > timeout_s * (1 + STUCK_FACTOR):
                self.say(f"still not healed after {waited:.0f}s: {missing}")
                return None
            time.sleep(POLL_S)

    def leaders(self) -> dict[str, str | None]:
        """Each topic's leader as the first node that answers sees it."""
        for node in self.run.nodes.values():
            view = cluster_view(node)
            if view is not None:
                return {t: view["topics"].get(t, {}).get("leader") for t in self.run.topics}
        return {}

    def unhealed(self, writes_since: float | None) -> str | None:
        missing = cluster_unhealed(self.run.nodes, list(self.run.topics))
        if missing is not None or writes_since is None:
            return missing
        stalled = [t for t, w in self.run.writers.items() if w.last_ack_s <= writes_since]
        return f"no ack since the fault for {', '.join(stalled)}" if stalled else None

    # --- the end ------------------------------------------------------------------------

    def finish(self) -> None:
        run, report = self.run, self.report
        self.say("stopping the writers")
        hung = run.stop_writers()
        report.failures += [f"the writer of {topic} did not stop" for topic in hung]
        if self.wait_healed(time.monotonic(), "the end", writes=False) is not None:
            for topic in run.topics:
                try:
                    view = wait_caught_up(run.nodes["n1"], topic, self.args.heal_timeout_s)
                    self.say(f"{topic}: followers caught up, hw {view['hw']}")
                except AssertionError as error:
                    report.failures.append(f"{topic}: {error}")
        self.say("stopping the nodes")
        for nid, code in run.stop_nodes().items():
            if code != 0:
                report.failures.append(f"{nid} did not stop cleanly (exit {code})")
        run.zk.stop()
        self.say("reading every node's copy of every topic")
        for topic, durability in run.topics.items():
            self.check_topic(topic, TopicFigures(durability))
        report.oracle_checked = True

    def unchecked_report(self) -> RunReport:
        """The report of a run cut short: the writers' figures, no oracle."""
        for topic, writer in self.run.writers.items():
            self.report.topics[topic] = TopicFigures(
                self.run.topics[topic], len(writer.ack_log), writer.failures,
                errors=writer.errors)
        self.report.elapsed_s = time.monotonic() - self.started
        return self.report

    def check_topic(self, topic: str, figures: TopicFigures) -> None:
        writer = self.run.writers[topic]
        found = copies(self.run.nodes, self.args.shards, topic)
        bad = acked_violations(found, writer.ack_log, writer.sent)
        self.report.violations += [f"{topic}: {line}" for line in bad]
        figures.acked, figures.failed = len(writer.ack_log), writer.failures
        figures.errors = writer.errors
        acked_at = {number: seq for seq, number in writer.ack_log}
        held = set()
        for copy in found.values():
            numbers = {seq: _number(envelope) for seq, envelope in (copy or {}).items()}
            held |= set(numbers.values())
            if len(copy or {}) > figures.records:
                figures.records = len(copy)
                figures.stored_twice = sum(1 for seq, n in numbers.items()
                                           if n in acked_at and acked_at[n] != seq)
        figures.in_doubt_stored = sum(1 for n in writer.in_doubt if n in held)
        self.report.topics[topic] = figures
        self.say(f"{topic}: {figures.records} records in the largest copy, {figures.acked} "
                 f"acked, violations {len(bad)}")


def _number(envelope: bytes) -> int | None:
    data = orjson.loads(envelope).get("d")
    return data.get("n") if isinstance(data, dict) else None
