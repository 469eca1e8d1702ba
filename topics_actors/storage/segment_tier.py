"""Where a segment lives: the hot tier (the data dir) or the cold tier (`TOPICS_COLD_DIR`).

Both tiers use the same relative names (`topics/<topic dir>/seg-<first>.data|.idx`). Which
tier holds a segment is not recorded anywhere: a reader looks in the hot tier first and then
in the cold one, so a relocation that crashed after its copy (both tiers hold the segment)
still reads the hot copy, and one that finished reads the cold copy.
"""

from __future__ import annotations

import os

from topics_actors.storage.fs import Fs
from topics_actors.storage.segment import data_path


class Tiers:
    def __init__(self, data_dir: str, cold_dir: str | None = None):
        self.data_dir = data_dir
        self.cold_dir = cold_dir or None

    def cold_of(self, hot_topic_dir: str) -> str | None:
        """The cold tier's directory for a topic directory of the hot tier."""
        if self.cold_dir is None:
            return None
        return os.path.join(self.cold_dir, os.path.relpath(hot_topic_dir, self.data_dir))

    def resolve(self, fs: Fs, hot_topic_dir: str, first_seq: int) -> str:
        """The directory holding the segment: hot when its .data is there, else cold (when
        the cold tier has it); the hot directory when neither has it."""
        cold = self.cold_of(hot_topic_dir)
        if cold is None or fs.exists(data_path(hot_topic_dir, first_seq)):
            return hot_topic_dir
        return cold if fs.exists(data_path(cold, first_seq)) else hot_topic_dir

    def roots(self) -> list[str]:
        """The `topics` directory of each tier."""
        roots = [os.path.join(self.data_dir, "topics")]
        if self.cold_dir is not None:
            roots.append(os.path.join(self.cold_dir, "topics"))
        return roots
