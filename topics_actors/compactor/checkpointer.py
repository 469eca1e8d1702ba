"""One checkpoint, start to finish, without sockets (the compactor's pure core).

Given each shard's barrier position (everything before it fsynced and published), absorb
every WAL group up to its barrier (retired groups to their end) into segments, make the
segments and their directories durable, write the snapshot atomically, and only then prune
older snapshots. Segment files no kept snapshot lists are removed by the reclaimer's sweep;
WAL files by their shard, when it is told the snapshot is durable.

Any failure midway discards the in-memory state and reloads it from the last durable
snapshot: re-reading frames is harmless (the ledger skips seqs it already has), but only
from a state that matches the positions it starts from.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from topics_actors.compactor.segment_ledger import SegmentLedger, SegmentLimits
from topics_actors.errors import CorruptionError
from topics_actors.storage import failpoint, snapshot
from topics_actors.storage.fs import Fs
from topics_actors.storage.segment_sweep import remove_dir
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.wal_layout import (
    group_dir, key_generation, key_shard, layout_generation, list_wal_files, retired_groups,
)

log = logging.getLogger(__name__)

CHUNK_FRAMES = 16_384


class Checkpointer:
    def __init__(self, fs: Fs, data_dir: str, limits: SegmentLimits = SegmentLimits(),
                 clock: Callable[[], int] | None = None, tiers: Tiers | None = None):
        self.fs = fs
        self.data_dir = data_dir
        self.limits = limits
        self.clock = clock or (lambda: time.time_ns() // 1_000_000)
        self.tiers = tiers or Tiers(data_dir)
        self.snapshot_id = 0
        self.positions: dict[str, list[int]] = {}
        self.retired_done: set[str] = set()
        self.ledger = SegmentLedger(fs, data_dir, limits, self.clock(), self.tiers)
        self.previous_retired_done: set[str] = set()   # as of the previous snapshot
        self.snapshot_retired_done: set[str] = set()   # as of the newest snapshot
        self.load()

    def load(self) -> None:
        """(Re)build the state of the newest valid snapshot. All or nothing: until a load
        succeeds the Checkpointer is `broken` and every checkpoint first retries the load,
        so a state that does not match its positions is never written."""
        self.broken = True
        found = snapshot.load_newest(self.fs, self.data_dir, snapshot.BODY_KEYS)
        ledger = SegmentLedger(self.fs, self.data_dir, self.limits, self.clock(), self.tiers)
        snapshot_id, positions, retired_done = 0, {}, set()
        if found is not None:
            snapshot_id, body = found
            positions = {k: list(v) for k, v in body["positions"].items()}
            retired_done = set(body["retired_done"])
            ledger.next_dir = body["next_dir"]
            for entry in body["topics"]:
                ledger.restore(entry)
        self.ledger.close()
        self.ledger, self.snapshot_id = ledger, snapshot_id
        self.positions, self.retired_done = positions, retired_done
        self.previous_retired_done, self.snapshot_retired_done = set(), set(retired_done)
        self.broken = False

    # --- absorbing the WAL ------------------------------------------------------------------

    def absorb_group(self, key: str, directory: str, target: tuple[int, int] | None,
                     tick: Callable[[], None] = lambda: None) -> int:
        """Read group `key` from its position up to `target` (None: to the end of its log).
        Returns the bytes read."""
        start_idx, start_offset = self.positions.get(key, (0, 0))
        position, ledger, read = (start_idx, start_offset), self.ledger, 0
        for idx, path in list_wal_files(self.fs, directory):
            if idx < start_idx or (target is not None and idx > target[0]):
                continue
            view = self.fs.map_read(path)
            try:
                begin = start_offset if idx == start_idx else 0
                end = target[1] if target is not None and idx == target[0] else len(view)
                offset, ended = begin, begin >= end
                ledger.position = (key_generation(key), idx)
                while not ended:
                    offset, ended = ledger.scan(view, offset, end, CHUNK_FRAMES)
                    tick()
                if target is not None and idx == target[0] and offset != end:
                    raise CorruptionError(f"{path}: the log ends at offset {offset}, before "
                                          f"the checkpoint barrier at {end}")
                read += offset - begin
                position = (idx, offset)
            finally:
                getattr(view, "close", lambda: None)()
        if target is not None and position < tuple(target):
            raise CorruptionError(f"WAL group {key} ends at {position}, before the barrier "
                                  f"{tuple(target)}")
        self.positions[key] = list(position)
        return read

    def checkpoint(self, barriers: dict[str, tuple[int, int]],
                   tick: Callable[[], None] = lambda: None,
                   accounting: list | None = None) -> int:
        """Absorb up to `barriers` (group key -> position) and write a snapshot; returns its
        id. `accounting`: the shards' rows sent with their barriers (floors and counters
        only the owner knows exactly). On any failure the state is reloaded from the last
        snapshot and the error raised."""
        if self.broken:
            self.load()
        try:
            self.ledger.now = self.clock()
            self.ledger.reader.close()   # the reclaimer may have moved segments to cold since
            generation = layout_generation(self.fs, self.data_dir)
            for key, directory in retired_groups(self.fs, self.data_dir):
                if key not in self.retired_done:
                    self.absorb_group(key, directory, None, tick)
                    self.retired_done.add(key)
            for key, target in sorted(barriers.items()):
                if key_generation(key) != generation:
                    raise CorruptionError(f"barrier for {key} but the layout generation is "
                                          f"{generation}")
                self.absorb_group(key, group_dir(self.data_dir, key_shard(key)), tuple(target),
                                  tick)
            self.ledger.account(accounting or [])
            return self._write(tick)
        except BaseException:
            self.broken = True
            self.load()
            raise

    def _write(self, tick: Callable[[], None]) -> int:
        failpoint.hit("checkpoint::before_flush")
        now = self.clock()
        self.ledger.seal_idle(now)
        self.ledger.drop_dead()
        self.ledger.flush_all(tick)
        tick()
        # After a fallback past a bad newest file, a new id must still be above every id
        # on disk: shards ignore ids at or below the one they took in.
        on_disk = snapshot.list_snapshots(self.fs, self.data_dir)
        newest_on_disk = on_disk[0][0] if on_disk else 0
        body = {"id": max(self.snapshot_id, newest_on_disk) + 1, "ts": now,
                "positions": self.positions, "retired_done": sorted(self.retired_done),
                "next_dir": self.ledger.next_dir, "topics": self.ledger.entries(now)}
        snapshot.write_snapshot(self.fs, self.data_dir, body["id"], body)
        previous, self.snapshot_id = self.snapshot_id, body["id"]
        # The previous snapshot stays loadable (with the WAL and segments it needs), so a
        # newest snapshot that rots can still fall back to it without losing anything.
        failpoint.hit("checkpoint::before_prune")
        snapshot.prune(self.fs, self.data_dir, previous or self.snapshot_id)
        self.previous_retired_done = self.snapshot_retired_done
        self.snapshot_retired_done = set(self.retired_done)
        return self.snapshot_id

    # --- cleaning up ----------------------------------------------------------------------------

    def remove_retired(self) -> int:
        """Delete retired WAL groups that both kept snapshots have absorbed (call once every
        shard has taken in the newest). Returns the number of groups removed."""
        removed = 0
        for key, directory in retired_groups(self.fs, self.data_dir):
            if key in self.previous_retired_done:
                remove_dir(self.fs, directory)
                parent = os.path.dirname(directory)
                if not self.fs.listdir(parent):
                    self.fs.rmdir(parent)
                removed += 1
        return removed

    def sweep_idle_maps(self, now_ns: int) -> None:
        """Unmap the segments no checkpoint read lately (SegmentReader.sweep_idle): an
        idle map keeps a descriptor, and a dropped segment's disk space, for nothing."""
        self.ledger.reader.sweep_idle(now_ns)

    def close(self) -> None:
        self.ledger.close()
