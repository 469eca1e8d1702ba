"""Killing one process of a node, by kind, and waiting until the node has healed.

ROLES maps a process kind to its killer: kill(node, rng, restart) SIGKILLs one process of
that kind and returns (the node serving afterwards, the victim's name) once the node is
ready again: the same node, or for the supervisor a new one from restart(zmq_port) on the
same front port, so clients ride through. Adding a kind is one line.
"""

from __future__ import annotations

import os
import random
import signal
import time

from tools.testing.node_harness import alive, wait_for

HEAL_TIMEOUT_S = 60


def _wait_child_back(node, pick, incarnation: int, what: str) -> None:
    def back():
        try:
            status = node.status()
        except Exception:   # the front may be busy: try again
            return False
        child = pick(status)
        return (child["incarnation"] > incarnation and child["state"] == "ready"
                and status["node_ready"])
    wait_for(back, HEAL_TIMEOUT_S, f"{what} to be restarted and ready")


def kill_shard_at(node, index: int) -> tuple[float, float]:
    """SIGKILL shard `index`; (killed at, back and ready at), both time.monotonic()."""
    info = node.status()["shards"][index]
    killed_s = time.monotonic()
    os.kill(info["pid"], signal.SIGKILL)
    _wait_child_back(node, lambda s: s["shards"][index], info["incarnation"],
                     f"shard {index}")
    return killed_s, time.monotonic()


def kill_shard(node, rng: random.Random, restart):
    index = rng.randrange(node.shards)
    kill_shard_at(node, index)
    return node, f"shard-{index:02d}"


def process_killer(role: str):
    def kill(node, rng: random.Random, restart):
        pick = lambda status: next(p for p in status["processes"] if p["role"] == role)
        proc = pick(node.status())
        os.kill(proc["pid"], signal.SIGKILL)
        _wait_child_back(node, pick, proc["incarnation"], role)
        return node, f"{role}-00"
    return kill


def kill_supervisor(node, rng: random.Random, restart):
    """SIGKILL the supervisor and start a new one on the same data dir at once: it must wait
    (the data-dir lock) until every old child has noticed and exited by itself."""
    children = [child.pid for child in node.children()]
    assert children, "the node has no children"
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait()
    started = time.monotonic()
    fresh = restart(node.ports["zmq"])
    assert not alive(children), "a new supervisor started while a child of the old one lived"
    node.forget()        # no killpg: its pid may already belong to someone else
    return fresh, f"supervisor (new one serving in {time.monotonic() - started:.2f}s)"


ROLES = {
    "shard": kill_shard,
    "compactor": process_killer("compactor"),
    "reclaimer": process_killer("reclaimer"),
    "supervisor": kill_supervisor,
    "gateway": process_killer("gateway"),
}
