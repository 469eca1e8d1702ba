"""One soak, start to finish: a node in a temp dir, its idle figures, the topics, the load
process, a sample of every node process every `sample_s`, then the verdict and a clean
stop. Everything started is stopped, on errors and Ctrl-C too.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
from typing import NamedTuple

import psutil

from topics_actors.compactor.segment_ledger import CHECKPOINT_MAPS_MAX
from topics_actors.storage.segment import SEGMENT_MAPS_MAX
from tools.soak import growth_verdict as verdict
from tools.soak.load_mix import load_main
from tools.soak.process_sampler import ProcessSample, node_processes, sample_all
from tools.soak.soak_plan import SoakPlan
from tools.testing.node_harness import Node, alive

MIB = 1 << 20
LOAD_STOP_S = 60.0


def segment_maps_max(name: str) -> int:
    """How many segments a node process's reader may keep mapped (its LRU's bound)."""
    if name.startswith("shard-"):
        return SEGMENT_MAPS_MAX
    return CHECKPOINT_MAPS_MAX if name == "compactor" else 0


class Tick(NamedTuple):
    t_s: float
    retained: int
    ram_bytes: int          # ephemeral topics' record buffers
    processes: dict[str, ProcessSample]

    @property
    def anon(self) -> int:
        return sum(p.anon_bytes for p in self.processes.values())


class SoakRun:
    def __init__(self, plan: SoakPlan, base_dir: str | None = None, keep: bool = False,
                 out=print):
        self.plan = plan
        self.keep = keep or base_dir is not None
        self.base = base_dir or tempfile.mkdtemp(prefix="soak-")
        os.makedirs(self.base, exist_ok=True)
        self.log_path = os.path.join(self.base, "soak.log")

        def out_and_log(line: str) -> None:
            out(line)
            with open(self.log_path, "a") as handle:
                handle.write(line + "\n")
        self.out = out_and_log
        self.node: Node | None = None
        self.client = None                 # the soak's own, for its samples
        self.pids: dict[str, int] = {}
        self.idle: dict[str, ProcessSample] = {}
        self.ticks: list[Tick] = []
        self.failures: list[str] = []
        self.tally: dict = {}
        self.appended = 0

    # --- the run ----------------------------------------------------------------------------

    def run(self) -> int:
        """The soak; returns the exit status (0: PASS). The last line printed is the
        verdict."""
        try:
            # assigned before it starts: a stop (Ctrl-C, SIGTERM) during the start stops it
            self.node = Node(f"{self.base}/data", self.plan.shards, self.plan.node_env(),
                             log_path=f"{self.base}/node.log")
            self.node.start(timeout_s=120)
            self.client = self.node.client(request_timeout_ms=10_000)
            self.pids = node_processes(self.client.status())
            self.idle = self.measure_idle()
            self.make_topics()
            self.load_and_sample()
        except Exception as error:  # noqa: BLE001 - a soak that broke is a FAIL, said so
            self.failures.append(f"the soak broke: {type(error).__name__}: {error}")
        finally:
            self.stop_node()
        lines, status = self.verdict()
        for line in lines:
            self.out(line)
        if not self.keep and status == 0:
            shutil.rmtree(self.base, ignore_errors=True)
        elif status:
            self.out(f"(files kept in {self.base})")
            self.out(lines[-1])   # the verdict stays the last line
        return status

    def measure_idle(self) -> dict[str, ProcessSample]:
        """Each process's median over `idle_s`, the node started and nothing asked of it."""
        time.sleep(1.0)
        rounds = []
        deadline = time.monotonic() + self.plan.idle_s
        while time.monotonic() < deadline or not rounds:
            rounds.append(sample_all(self.pids))
            time.sleep(0.5)
        return {name: ProcessSample(*(int(statistics.median(r[name][i] for r in rounds))
                                      for i in range(len(ProcessSample._fields))))
                for name in self.pids}

    def make_topics(self) -> None:
        plan, client = self.plan, self.client
        for name, _tagged in plan.log_topics():
            client.put_topic(name, cap_records=plan.cap, durability=plan.durability(name))
        for name in plan.queue_topics():
            client.put_topic(name, type="queue", cap_records=plan.cap, durability="disk")

    def load_and_sample(self) -> None:
        ctx = mp.get_context("spawn")
        stopped, (mine, theirs) = ctx.Event(), ctx.Pipe(duplex=False)
        load = ctx.Process(target=load_main, name="soak-load", daemon=True,
                           args=(self.plan, self.node.endpoint, self.node.http_port,
                                 stopped, theirs))
        load.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < self.plan.minutes * 60 and load.is_alive():
                time.sleep(max(0.0, started + (len(self.ticks) + 1) * self.plan.sample_s
                               - time.monotonic()))
                self.tick(time.monotonic() - started)
        finally:
            stopped.set()
            if mine.poll(LOAD_STOP_S):
                self.tally = mine.recv()
            load.join(5)
            if load.is_alive():
                load.kill()
        self.appended = self.tally.get("appended", 0)

    def tick(self, t_s: float) -> None:
        client = self.client
        pids = node_processes(client.status())
        restarted = [name for name, pid in self.pids.items() if pids.get(name) != pid]
        if restarted:
            raise RuntimeError(f"node processes restarted or gone: {', '.join(restarted)}")
        retained = sum(t["count"] for t in client.list_topics(page_size=1000)["topics"])
        ram = sum(s.get("ram_bytes", 0) for s in client.shard_statuses())
        tick = Tick(t_s, retained, ram, sample_all(pids))
        self.ticks.append(tick)
        with open(os.path.join(self.base, "samples.jsonl"), "a") as handle:
            handle.write(json.dumps({"t_s": t_s, "retained": retained, "ram_bytes": ram,
                                     "processes": {n: p._asdict()
                                                   for n, p in tick.processes.items()}})
                         + "\n")
        idle = sum(p.anon_bytes for p in self.idle.values())
        per = verdict.bytes_per_record(tick.anon, idle, ram, retained)
        pss = sum(p.pss_bytes for p in tick.processes.values())
        self.out(f"t={t_s:6.0f}s retained {retained:>9,} anon {tick.anon / MIB:7.1f} MiB "
                 f"(+{(tick.anon - idle) / MIB:.1f} above idle, ephemeral buffers "
                 f"{ram / MIB:.1f}) pss {pss / MIB:.1f} MiB "
                 f"fds {sum(p.fds for p in tick.processes.values())} + segments "
                 f"{sum(p.segment_fds for p in tick.processes.values())} B/record {per:.1f}")

    def stop_node(self) -> None:
        if self.node is None or self.node.proc is None:
            return
        group = [p.pid for p in self.node.children()]
        if self.node.stop() != 0:
            self.failures.append("the node did not stop cleanly (exit status "
                                 f"{self.node.proc.returncode})")
        if alive(group):
            self.failures.append(f"processes left running: {alive(group)}")
            for pid in alive(group):
                psutil.Process(pid).kill()

    # --- the verdict ------------------------------------------------------------------------

    def verdict(self) -> tuple[list[str], int]:
        lines, failures = [], list(self.failures)
        failures += self.load_failures()
        start = verdict.steady_start([t.retained for t in self.ticks])
        figure = None
        if start is None:
            failures.append(f"the retained data never went flat ({len(self.ticks)} samples; "
                            "a longer run or smaller caps)")
            if len(self.ticks) >= 3:
                lines.append("(not steady; the last third of the samples:)")
                lines += self.table(self.ticks[-max(3, len(self.ticks) // 3):])
        else:
            steady = self.ticks[start:]
            lines += self.table(steady)
            failures += self.growth_failures(steady)
            figure, peak = self.per_record(steady)
            lines.append(f"steady from t={steady[0].t_s:.0f}s ({len(steady)} samples): "
                         f"{figure:.1f} B/record (median), {peak:.1f} at the peak; "
                         f"bound {self.plan.bound_bytes:g}")
            if figure > self.plan.bound_bytes:
                failures.append(f"{figure:.1f} B/record is over the bound of "
                                f"{self.plan.bound_bytes:g}")
        lines.append(f"load: {self.tally}")
        retained = self.ticks[-1].retained if self.ticks else 0
        if failures:
            return lines + [f"FAIL: {'; '.join(failures)}"], 1
        return lines + [f"PASS: {self.appended} appended, {retained} retained, "
                        f"{figure:.1f} B/record"], 0

    def load_failures(self) -> list[str]:
        tally = self.tally
        if not tally:
            return ["the load process sent no report"]
        if "crashed" in tally:
            return [f"the load process crashed: {tally['crashed']}"]
        out = [f"unexpected load errors: {tally['unexpected']}"] if tally["unexpected"] else []
        if not tally["appended"]:
            out.append("nothing was appended")
        return out

    def per_record(self, steady: list[Tick]) -> tuple[float, float]:
        idle = sum(p.anon_bytes for p in self.idle.values())
        figures = [verdict.bytes_per_record(t.anon, idle, t.ram_bytes, t.retained)
                   for t in steady]
        return statistics.median(figures), max(figures)

    def growth_failures(self, steady: list[Tick]) -> list[str]:
        if len(steady) < 3:
            return []
        times = [t.t_s for t in steady]
        out = []
        for name in self.pids:
            for field, unit in (("anon_bytes", MIB), ("pss_bytes", MIB), ("fds", 1),
                                ("segment_fds", 1), ("threads", 1)):
                values = [getattr(t.processes[name], field) for t in steady]
                tolerance = {"fds": verdict.DESCRIPTOR_SLACK,
                             "segment_fds": verdict.segment_descriptor_tolerance(
                                 segment_maps_max(name)),
                             "threads": verdict.THREAD_SLACK,
                             "pss_bytes": verdict.pss_tolerance(
                                 values, self.plan.wal_file_bytes())}.get(
                                     field, verdict.memory_tolerance(values))
                grew = verdict.growth(times, values, tolerance)
                if grew.growing:
                    out.append(f"{name} {field} keeps growing: +{grew.trend / unit:.1f} by its "
                               f"trend, +{grew.step / unit:.1f} last third over first "
                               f"(tolerance {tolerance / unit:.1f})")
        return out

    def table(self, steady: list[Tick]) -> list[str]:
        lines = ["process        idle anon  anon median/peak  anon trend   pss median/peak  "
                 "pss trend   fds  seg fds  threads"]
        times = [t.t_s for t in steady]
        for name in self.pids:
            anon = [t.processes[name].anon_bytes for t in steady]
            pss = [t.processes[name].pss_bytes for t in steady]
            last = steady[-1].processes[name]
            lines.append(
                f"{name:<14} {self.idle[name].anon_bytes / MIB:7.1f}  "
                f"{statistics.median(anon) / MIB:7.1f} / {max(anon) / MIB:6.1f}  "
                f"{verdict.growth(times, anon, 0).trend / MIB:+8.1f}  "
                f"{statistics.median(pss) / MIB:7.1f} / {max(pss) / MIB:6.1f}  "
                f"{verdict.growth(times, pss, 0).trend / MIB:+8.1f}  "
                f"{last.fds:5d}  {last.segment_fds:7d}  {last.threads:5d}")
        lines.append("(MiB; trends: the gain over the steady window by the Theil-Sen slope)")
        return lines
