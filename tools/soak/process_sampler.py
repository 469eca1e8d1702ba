"""What the soak samples of each process of a node: anonymous memory (`RssAnon`: the
process's own heap, stacks and anonymous maps), PSS (its share of everything resident,
mapped file pages included), open descriptors and threads.

Processes are named by role as the supervisor reports them (`supervisor`, `shard-00`,
`compactor`, `reclaimer`, `gateway-00`, ...). A name whose pid changes between samples was
restarted: the soak counts that as a failure, since a restart would also reset its memory.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil


class ProcessSample(NamedTuple):
    anon_bytes: int
    pss_bytes: int
    fds: int
    threads: int


def node_processes(status: dict) -> dict[str, int]:
    """Role name -> pid of every process of a node, from its status."""
    pids = {"supervisor": status["pid"]}
    for shard in status["shards"]:
        pids[f"shard-{shard['shard']:02d}"] = shard["pid"]
    for process in status["processes"]:
        same_role = [p for p in status["processes"] if p["role"] == process["role"]]
        name = (process["role"] if len(same_role) == 1
                else f"{process['role']}-{process['index']:02d}")
        pids[name] = process["pid"]
    return {name: pid for name, pid in pids.items() if pid}


def _proc_field(path: str, field: str) -> int:
    """A `<field>: <n> kB` line of a /proc file, in bytes."""
    with open(path) as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise ValueError(f"{path} has no {field}")


def sample(pid: int) -> ProcessSample:
    """One process's figures; psutil.NoSuchProcess (or OSError) if it has gone."""
    process = psutil.Process(pid)
    return ProcessSample(_proc_field(f"/proc/{pid}/status", "RssAnon:"),
                         _proc_field(f"/proc/{pid}/smaps_rollup", "Pss:"),
                         process.num_fds(), process.num_threads())


def sample_all(pids: dict[str, int]) -> dict[str, ProcessSample]:
    return {name: sample(pid) for name, pid in pids.items()}


def supported() -> bool:
    """Whether this system has what the sampler reads (Linux 4.14+ for smaps_rollup)."""
    return os.path.exists(f"/proc/{os.getpid()}/smaps_rollup")
