"""Read one node's copy of a topic from its data dir, offline: the shard's own recovery run
on a copy of the directory (the node must be stopped; the original is left untouched).
Replication tests compare these copies record by record."""

from __future__ import annotations

import os
import shutil
import tempfile

from topics_actors.config import ShardOptions
from topics_actors.shard.shard_core import ShardCore
from topics_actors.storage.fs import RealFs
from topics_actors.topic_identity import shard_of_name


def topic_copy(data_dir: str, shards: int, topic: str) -> dict[int, bytes] | None:
    """{seq: stored envelope} of the live records of `topic` (above its floors, not
    deleted) as the node would recover them; None if it has no copy."""
    scratch = tempfile.mkdtemp(prefix="replica-copy-")
    try:
        copy = os.path.join(scratch, "data")
        shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns("run", "*.lock"))
        core = ShardCore(RealFs(), ShardOptions(copy, shard_of_name(topic, shards), shards,
                                                background_prealloc=False))
        for _ in core.replay().run():
            pass
        state = core.registry.get(topic)
        found = None
        if state is not None:
            found = {seq: rec.envelope for seq in range(state.earliest_seq(), state.head + 1)
                     if (rec := core.reader.read(state, seq)) is not None}
        core.wal.close()
        core.reader.close()
        return found
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
