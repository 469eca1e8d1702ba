"""Control kinds between child processes and the supervisor (DEALER -> ROUTER).

A child sends Hello once its sockets are bound, then Heartbeat at least every
`heartbeat_interval_ms`; the supervisor replies to neither. A child that stops heartbeating
for `heartbeat_timeout_ms` is killed and restarted.
"""

from __future__ import annotations

from topics_actors.protocol.envelope import Message, message


@message
class Hello(Message):
    """child -> supervisor. role: "shard" (later "compactor", "reclaimer", "gateway");
    index: shard number; endpoint: the tcp:// endpoint it serves clients on; ipc: its
    ipc:// endpoint for processes of the node."""
    KIND = "hello"
    role: str
    index: int
    pid: int
    endpoint: str = ""
    ipc: str = ""


@message
class Heartbeat(Message):
    """child -> supervisor. state: "replaying" | "ready" | "stopping"; replay_progress in
    [0, 1], monotone while replaying."""
    KIND = "heartbeat"
    role: str
    index: int
    pid: int
    state: str
    replay_progress: float = 0.0
