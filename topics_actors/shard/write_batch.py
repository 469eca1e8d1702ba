"""One group-commit batch of a shard: the frames to write, the operations to answer once
they are durable, and what to undo if the write fails."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from topics_actors.errors import TopicsError
from topics_actors.shard import retention
from topics_actors.shard.topic_state import TopicState


@dataclass
class CommitInfo:
    file_no: int = 0
    idx: int = 0                 # WAL file of the batch
    offset: int = 0              # where the batch starts in it
    end: int = 0                 # where it ends
    wal_ms: float = 0.0
    fsync_ms: float = 0.0


class Op:
    __slots__ = ("peer", "corr", "t0_ns", "is_write", "fn")

    def __init__(self, peer: bytes, corr: int, t0_ns: int, is_write: bool,
                 fn: Callable[[CommitInfo], dict]):
        self.peer, self.corr, self.t0_ns, self.is_write, self.fn = peer, corr, t0_ns, is_write, fn


class Batch:
    def __init__(self):
        self.buf = bytearray()
        self.needs_sync = False
        self.ops: list[Op] = []
        self.writes = 0
        self.undo: dict[str, tuple] = {}
        self.dedupe_added: list[tuple[TopicState, str]] = []
        self.created: list[TopicState] = []
        self.retention: dict[str, tuple[TopicState, retention.Floors]] = {}


def fail_with(error: TopicsError) -> Callable[[CommitInfo], dict]:
    """An operation that answers with `error`."""
    def fail(_info: CommitInfo) -> dict:
        raise error
    return fail
