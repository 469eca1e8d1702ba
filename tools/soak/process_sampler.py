"""What the soak samples of each process of a node: anonymous memory (`Pss_Anon`: its
share of the anonymous pages it maps, its heap, stacks and anonymous maps), PSS (its share
of everything resident, mapped file pages included), open descriptors and threads.

Descriptors are counted in two parts: those of segment files (`.data`, `.idx`), which a
process's segment reader holds while it keeps a segment mapped and which its LRU bounds
(growth_verdict.segment_descriptor_tolerance), and all the others (sockets, WAL files,
pipes), which nothing should make grow.

Shares, not `RssAnon`: children forked from the fork server share its pages until they
write them, and `RssAnon` would count a shared page once in every process that maps it.
Summed over every process of the node, shares count each page once.

Processes are named by role as the supervisor reports them (`supervisor`, `shard-00`,
`compactor`, `reclaimer`, `gateway-00`, ...); another child of the supervisor (the fork
server) is `helper-<n>`. A name whose pid changes between samples was restarted: the soak
counts that as a failure, since a restart would also reset its memory.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import psutil


SEGMENT_SUFFIXES = (".data", ".idx")


class ProcessSample(NamedTuple):
    anon_bytes: int
    pss_bytes: int
    fds: int              # descriptors other than segment files'
    threads: int
    segment_fds: int      # descriptors of segment files (.data, .idx)


def node_processes(status: dict) -> dict[str, int]:
    """Role name -> pid of every process of a node, from its status and the supervisor's
    children."""
    pids = {"supervisor": status["pid"]}
    for shard in status["shards"]:
        pids[f"shard-{shard['shard']:02d}"] = shard["pid"]
    for process in status["processes"]:
        same_role = [p for p in status["processes"] if p["role"] == process["role"]]
        name = (process["role"] if len(same_role) == 1
                else f"{process['role']}-{process['index']:02d}")
        pids[name] = process["pid"]
    known = set(pids.values())
    try:
        others = sorted(c.pid for c in psutil.Process(status["pid"]).children()
                        if c.pid not in known)
    except psutil.NoSuchProcess:
        others = []
    pids.update((f"helper-{i}", pid) for i, pid in enumerate(others))
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
    rollup = f"/proc/{pid}/smaps_rollup"
    total, segment = _descriptors(pid)
    return ProcessSample(_proc_field(rollup, "Pss_Anon:"), _proc_field(rollup, "Pss:"),
                         total - segment, process.num_threads(), segment)


def _descriptors(pid: int) -> tuple[int, int]:
    """(all open descriptors, those of segment files) of a process."""
    names = os.listdir(f"/proc/{pid}/fd")
    segment = 0
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:          # closed since the listing
            continue
        segment += target.endswith(SEGMENT_SUFFIXES)
    return len(names), segment


def sample_all(pids: dict[str, int]) -> dict[str, ProcessSample]:
    return {name: sample(pid) for name, pid in pids.items()}


def supported() -> bool:
    """Whether this system has what the sampler reads (Linux 5.7+ for Pss_Anon)."""
    try:
        _proc_field(f"/proc/{os.getpid()}/smaps_rollup", "Pss_Anon:")
    except (OSError, ValueError):
        return False
    return True
