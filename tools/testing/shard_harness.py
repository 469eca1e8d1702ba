"""An in-process shard harness: a ShardCore driven the way its socket shell drives it.

A ShardHarness submits every request of a turn and commits once, decodes the replies, and
can crash (release files and mappings without another write or sync) and restart over the
same data dir. A ShardEnv makes harnesses over one data dir and runs compactor checkpoints
and reclaimer sweeps against them. Unit tests, the fault sweeps and the crash workload use
it.
"""

from __future__ import annotations

import time

from tools.testing.fault_fs import FaultFs
from topics_actors.compactor.checkpointer import Checkpointer
from topics_actors.compactor.segment_ledger import SegmentLimits
from topics_actors.config import ShardOptions
from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply
from topics_actors.protocol.messages import Absorbed, Append, Checkpoint, Diff, GetTopic, PutTopic
from topics_actors.shard.replay import Replay
from topics_actors.shard.shard_core import ShardCore
from topics_actors.storage import segment_sweep
from topics_actors.storage.segment_tier import Tiers
from topics_actors.storage.wal_layout import group_dir, list_wal_files, prepare_layout
from topics_actors.topic_identity import shard_of_name

FILE_BYTES = 64 * 1024


def rec(data: bytes = b'{"x":1}', tag: str | None = None, node: str | None = None,
        meta: bytes | None = None) -> list:
    return [data, tag, node, meta]


class ShardHarness:
    def __init__(self, data_dir: str, fs, shard: int = 0, count: int = 1,
                 file_bytes: int = FILE_BYTES, clock=None, cold_dir: str | None = None,
                 policy: str = "park", node_id: str | None = None):
        self.data_dir, self.fs, self.shard, self.count = data_dir, fs, shard, count
        self.node_id = node_id                            # a cluster node's shard
        self.cold_dir, self.policy = cold_dir, policy     # policy: on recovery mismatches
        self.file_bytes, self.clock = file_bytes, clock
        self.core: ShardCore | None = None
        self.replay: Replay | None = None
        self.progress: list[float] = []

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> "ShardHarness":
        options = ShardOptions(self.data_dir, self.shard, self.count,
                               wal_file_bytes=self.file_bytes, background_prealloc=False,
                               background_flush=False, cold_dir=self.cold_dir,
                               recovery_on_mismatch=self.policy,
                               node_id=self.node_id)
        kwargs = {"clock": self.clock} if self.clock else {}
        self.core = ShardCore(self.fs, options, **kwargs)
        self.replay = self.core.replay()
        self.progress = list(self.replay.run())
        self.core.audit_segments(None)     # the shell does it in slices once it serves
        self.core.ready = True
        return self

    def close(self) -> None:
        self.core.close()
        self.core = None

    def crash(self) -> None:
        """Die now: staged work is lost, nothing more is written or synced."""
        core, self.core = self.core, None
        core.wal.writer.prealloc.close()
        if core.wal.writer.handle is not None:
            core.wal.writer.handle.close()       # a plain close(2): no fsync
        core.wal.files.close()
        core.reader.segments.close()

    def restart(self, crash: bool = True) -> "ShardHarness":
        self.crash() if crash else self.close()
        return self.start()

    # --- requests -----------------------------------------------------------------------------

    def batch(self, *msgs) -> list:
        """Submit every message, commit once; a reply dict or the TopicsError per message."""
        for corr, msg in enumerate(msgs, 1):
            self.core.submit(b"peer", corr, msg, time.perf_counter_ns())
        out = []
        for _peer, raw in self.core.commit():
            try:
                out.append(decode_reply(raw)[1])
            except TopicsError as error:
                out.append(error)
        assert len(out) == len(msgs)
        return out

    def turn(self, *msgs, first: int = 1) -> dict:
        """Submit `msgs` (corr first, first + 1, ...) and commit once: every reply that
        came out, by corr (a parked request's comes with a later commit), performance
        left out; an error as its TopicsError."""
        for corr, msg in enumerate(msgs, first):
            self.core.submit(b"peer", corr, msg, time.perf_counter_ns())
        out = {}
        for _peer, raw in self.core.commit():
            try:
                corr, body = decode_reply(raw)
                body.pop("performance", None)
            except TopicsError as error:
                corr, body = error.corr, error
            out[corr] = body
        return out

    def call(self, msg) -> dict:
        reply = self.batch(msg)[0]
        if isinstance(reply, TopicsError):
            raise reply
        return reply

    def append(self, topic: str, *records, **kw) -> dict:
        return self.call(Append(topic, [list(r) for r in records] or [rec()], **kw))

    def put(self, topic: str, **config) -> dict:
        return self.call(PutTopic(topic, config))

    def get(self, topic: str) -> dict:
        return self.call(GetTopic(topic, touch=False))

    def exists(self, topic: str) -> bool:
        return topic in self.core.registry.topics

    def records(self, topic: str, from_seq: int = 0) -> list:
        """Every record after from_seq as [seq, ts, envelope, tag, node, has_meta]."""
        out = []
        while True:
            reply = self.call(Diff(topic, from_seq, limit=1000, include_tags=True))
            out += reply["records"]
            from_seq = reply["next_from_seq"]
            if reply["caught_up"]:
                return out

    def snapshot(self) -> dict:
        """Every topic's head, count, config and records: what a restart must preserve."""
        state = {}
        for name in sorted(self.core.registry.topics):
            info = self.get(name)
            state[name] = (info["head_seq"], info["count"], info["config"],
                           self.records(name))
        return state

    def wal_files(self) -> list[tuple[int, str]]:
        return list_wal_files(self.fs, group_dir(self.data_dir, self.shard))


class ShardEnv:
    """Harnesses over one data dir; `layout(n)` (re)prepares the WAL layout for n shards."""

    def __init__(self, data_dir: str, fs: FaultFs):
        self.data_dir, self.fs = data_dir, fs

    def layout(self, count: int) -> int:
        return prepare_layout(self.fs, self.data_dir, count)

    def shard(self, shard: int = 0, count: int = 1, **kw) -> ShardHarness:
        return ShardHarness(self.data_dir, self.fs, shard, count, **kw)

    def single(self, **kw) -> ShardHarness:
        self.layout(1)
        return self.shard(0, 1, **kw).start()

    def cluster(self, count: int) -> list[ShardHarness]:
        self.layout(count)
        return [self.shard(s, count).start() for s in range(count)]

    def checkpointer(self, cold_dir: str | None = None, **limits) -> Checkpointer:
        return Checkpointer(self.fs, self.data_dir, SegmentLimits(**limits),
                            tiers=Tiers(self.data_dir, cold_dir))

    def checkpoint(self, harnesses: list[ShardHarness],
                   checkpointer: Checkpointer | None = None, absorb: bool = True) -> int:
        """One compactor checkpoint over live harnesses: barriers, snapshot, absorbed."""
        own = checkpointer or self.checkpointer()
        try:
            barriers, accounting = {}, []
            for h in harnesses:
                reply = h.call(Checkpoint())
                barriers[reply["group"]] = (reply["idx"], reply["offset"])
                accounting += reply["accounting"]
            snap_id = own.checkpoint(barriers, accounting=accounting)
            self.sweep()
        finally:
            if checkpointer is None:
                own.close()
        if absorb:
            for h in harnesses:
                h.call(Absorbed(snap_id))
        return snap_id

    def sweep(self) -> int:
        """The reclaimer's sweep of segment files no kept snapshot lists (none while a
        snapshot on disk cannot be read)."""
        bodies = segment_sweep.snapshot_bodies(self.fs, self.data_dir)
        if bodies is None:
            return 0
        keep = segment_sweep.kept_segments(bodies)
        return segment_sweep.sweep(self.fs, Tiers(self.data_dir), keep)

    @staticmethod
    def owner(cluster: list[ShardHarness], topic: str) -> ShardHarness:
        return cluster[shard_of_name(topic, len(cluster))]
