"""Named failpoints at persistence call sites, armable from the environment.

TOPICS_FAILPOINTS="wal::after_write=kill,recovery::mid_replay=sleep:200" arms them in a
subprocess. Actions: `kill` (SIGKILL this process: a crash at exactly that instant),
`raise` (an OSError(EIO) at the site), `sleep:<ms>`. Unarmed sites cost one dict lookup.
"""

from __future__ import annotations

import os
import signal
import time

_ARMED: dict[str, str] = {}


def arm(spec: str) -> None:
    """Arm failpoints from a `name=action[,name=action]` spec (replaces the current set)."""
    _ARMED.clear()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        _ARMED[name.strip()] = action.strip() or "kill"


def disarm() -> None:
    _ARMED.clear()


def armed(name: str) -> bool:
    return name in _ARMED


def hit(name: str) -> None:
    if not _ARMED:
        return
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise OSError(5, f"failpoint {name}")
    elif action.startswith("sleep:"):
        time.sleep(int(action[6:]) / 1000)


arm(os.environ.get("TOPICS_FAILPOINTS", ""))
