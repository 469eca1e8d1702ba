"""Named failpoints at persistence call sites, armable from the environment.

TOPICS_FAILPOINTS="wal::after_write=kill@3,recovery::mid_replay=sleep:200" arms them in a
subprocess. Actions: `kill` (SIGKILL this process: a crash at exactly that instant),
`raise` (an OSError(EIO) at the site), `sleep:<ms>`, `abort` (raise Abort, a BaseException
no handler of the engine catches: an in-process test's crash). `@N` fires at the N-th hit
of the site only (1-based; default: every hit). Unarmed sites cost one test of a global.

Every site, where it strikes (a test checks this table against the code):
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

SITES = {
    "wal::after_write": "a WAL batch is written, not yet synced or acked",
    "wal::after_fdatasync": "a WAL batch is synced, not yet published or acked",
    "wal::after_rotate_rename": "a new WAL file is renamed in, its directory not synced",
    "layout::before_rename": "LAYOUT.tmp is written and synced, not renamed",
    "layout::mid_retire": "one old WAL group is moved into retired-<g>, others not yet",
    "recovery::mid_replay": "a shard replayed part of its WAL (after each chunk)",
    "recovery::before_truncate": "a shard is about to cut a torn WAL tail",
    "delete::after_commit_before_apply": "a record delete is durable, not yet applied",
    "retention::before_apply": "an EvictWatermark is durable, the floors not yet raised",
    "absorb::before_wal_remove": "a shard took a snapshot in, before unlinking WAL files",
    "checkpoint::before_flush": "the compactor absorbed the WAL, before writing segments",
    "segput::after_data_before_idx": "a segment's .data is synced, its .idx not yet",
    "segdel::after_write_before_fsync": "del bytes are flipped in segments, not synced",
    "segput::before_dirfsync": "segment files are synced, their directories not yet",
    "snapshot::before_rename": "snapshot .tmp is written and synced, not renamed",
    "snapshot::after_rename": "the snapshot is renamed, meta/ not synced",
    "checkpoint::before_prune": "the snapshot is durable, older ones not pruned",
    "snapshot::before_prune": "about to remove snapshots older than the kept one",
    "reclaim::between_unlinks": "a removed segment's .data is unlinked, its .idx not yet",
    "cold::after_copy": "a segment is copied to the cold tier, the hot copy still there",
    "cold::before_hot_delete": "the cold copy has every del byte, the hot one not unlinked",
    "repair::before_sync": "a quarantine repair wrote fixes into one file, not yet synced",
}

_ARMED: dict[str, str] = {}
_counting = False
HITS: Counter[str] = Counter()


class Abort(BaseException):
    """The process dies at a failpoint (in-process tests): not an Exception on purpose."""


def arm(spec: str) -> None:
    """Arm failpoints from a `name=action[,name=action]` spec (replaces the current set)."""
    _ARMED.clear()
    HITS.clear()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        _ARMED[name.strip()] = action.strip() or "kill"


def disarm() -> None:
    _ARMED.clear()


def count_hits(on: bool) -> None:
    """Count every site's hits in HITS (tests learn which sites a workload reaches)."""
    global _counting
    _counting = on
    HITS.clear()


def armed(name: str) -> bool:
    return name in _ARMED or _counting


def hit(name: str) -> None:
    if not _ARMED and not _counting:
        return
    HITS[name] += 1
    action = _ARMED.get(name)
    if action is None:
        return
    action, _, nth = action.partition("@")
    if nth and HITS[name] != int(nth):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise OSError(5, f"failpoint {name}")
    elif action == "abort":
        raise Abort(name)
    elif action.startswith("sleep:"):
        time.sleep(int(action[6:]) / 1000)


arm(os.environ.get("TOPICS_FAILPOINTS", ""))
