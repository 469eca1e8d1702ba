"""The answering side of a shard's commit: each operation's reply encoded, and the replies
that wait. A handler's answer is a dict (the reply now), or a reply that waits: a read
parked until its topic publishes or its wait ends (long_poll.Park), an `acks: all` write
until the high watermark covers it (AwaitHw), a replicated delete or ack until every
in-sync replica applied its op (AwaitOp). Replication lets the waiting writes go later
(`released`); parked reads are answered when woken or expired (`answer_waiters`).
"""

from __future__ import annotations

import logging
import time

from topics_actors.errors import StorageError, TopicsError
from topics_actors.protocol import encode_error, encode_reply
from topics_actors.shard.batch_stager import CommitInfo
from topics_actors.shard.long_poll import LongPolls, Park, Waiter
from topics_actors.shard.replication.leader_duties import AwaitHw
from topics_actors.shard.replication.replica_book import ReplicaBook
from topics_actors.shard.replication.replica_ops import AwaitOp

log = logging.getLogger(__name__)

Reply = tuple[bytes, bytes]     # (peer, encoded reply)


class ReplyDesk:
    def __init__(self, shard: int, polls: LongPolls, replicas: ReplicaBook):
        self.shard = shard
        self.polls = polls
        self.replicas = replicas

    def reply(self, peer: bytes, corr: int, t0_ns: int, fn, info: CommitInfo) -> Reply | None:
        """The reply of an operation whose commit is `info` (None: it waits)."""
        try:
            body = fn(info)
            if type(body) is not dict:
                body = self._hold(peer, corr, t0_ns, body, info)
                if body is None:
                    return None
        except TopicsError as error:
            return peer, encode_error(corr, error)
        except OSError as exc:   # an I/O error of a read: answer it, keep serving
            log.error("event=read_failed shard=%d error=%r", self.shard, exc)
            return peer, encode_error(corr, StorageError(f"I/O error: {exc}"))
        body["performance"] = {"server_total_ms": (time.perf_counter_ns() - t0_ns) / 1e6,
                               "wal_append_ms": info.wal_ms, "fsync_ms": info.fsync_ms}
        return peer, encode_reply(corr, body)

    def _hold(self, peer: bytes, corr: int, t0_ns: int, body, info: CommitInfo) -> dict | None:
        """A reply that may wait (module docstring). None: it waits; else the body now."""
        if type(body) is AwaitOp:
            if self.replicas.leader.hold_op(peer, corr, t0_ns, body):
                return None
            body = (body.reply or (lambda _gone: {"topic": body.topic, "deleted": 0}))(0)
        if type(body) is AwaitHw:
            if self.replicas.leader.hold(peer, corr, t0_ns, body):
                body.body["performance"] = {"wal_append_ms": info.wal_ms,
                                            "fsync_ms": info.fsync_ms}
                return None
            body = body.body
        if isinstance(body, Park):
            if self.polls.park(Waiter(peer, corr, t0_ns, body, time.monotonic_ns())):
                return None
            body = body.answer()
        return body

    def answer_waiters(self, waiters: list[Waiter]) -> list[Reply]:
        """The replies of parked reads woken or expired."""
        return [self.reply(w.peer, w.corr, w.t0_ns, lambda _info, w=w: w.answer(),
                           CommitInfo())
                for w in waiters]

    def released(self) -> list[Reply]:
        """The answers replication let go: `acks: all` writes the watermark now covers, or
        that lost their leader, and applied ops. A follower's fetch may cover a write
        before any commit, so the shell asks between commits too (their own commit is long
        done: they do not wait for the fsync of the batch being gathered)."""
        if not self.replicas.has_released():
            return []
        replies = []
        for peer, corr, t0_ns, body, error in self.replicas.take_released():
            if error is not None:
                replies.append((peer, encode_error(corr, error)))
            else:
                body["performance"]["server_total_ms"] = (time.perf_counter_ns() - t0_ns) / 1e6
                replies.append((peer, encode_reply(corr, body)))
        return replies
