"""A leader's answers to its followers (docs/CLUSTER.md): a fetch (the records after the
follower's durable log end, the keys of the writes among them, the ops it lacks; parked
while there is nothing new) and an epoch query (where an epoch of its log ends). A fetch
also reports the follower's progress, which may raise the high watermark (LeaderDuties).
"""

from __future__ import annotations

from topics_actors.cluster.epoch_cache import EpochEnd
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import EpochQuery, ReplicaFetch
from topics_actors.shard.batch_stager import CommitInfo, Staged, read_op
from topics_actors.shard.long_poll import Park
from topics_actors.shard.replication import replica_records
from topics_actors.shard.replication.leader_duties import FETCH_PREFIX, LeaderDuties
from topics_actors.shard.replication.replica import Leadership
from topics_actors.shard.replication.replica_ops import ops_of

FETCH_BYTES_MAX = 1 << 20     # payload per fetch answer


class FetchAnswers:
    """The answering side of a leader's duties (module docstring)."""

    def __init__(self, duties: LeaderDuties):
        self.duties = duties          # the high watermark and the ops a fetch may move
        self.replicas, self.registry = duties.replicas, duties.registry
        self.reader, self.stager, self.ops = duties.reader, duties.stager, duties.ops

    def fetch(self, msg: ReplicaFetch) -> Staged:
        lead, topic = self._led(msg.topic, msg.leader_epoch)
        tracker = lead.tracker
        if msg.fetch_leo > topic.head + 1:
            raise TopicsError(f"fetch from {msg.fetch_leo} past the leader's log end "
                              f"{topic.head + 1}", ErrorCode.INVALID_REQUEST,
                              {"reason": "seq_out_of_range", "leo": topic.head + 1})
        self.duties.advance(topic, tracker.fetched(msg.node, msg.fetch_leo,
                                                   self.duties.clock_ms()))
        if lead.keys is not None:
            fetched = [p.leo for p in tracker.followers.values()]
            if fetched and min(fetched) > 0:
                lead.keys.forget_below(min(fetched))
        if tracker.ops_fetched(msg.node, msg.ops_leo):
            self.duties.ops_moved(topic)

        def now() -> dict:
            body = self._records_from(msg, lead)
            body.update(self.ops.answer(topic, msg.ops_leo, msg.ops_epoch, tracker))
            body["ops_applied"] = ops_of(topic).applied
            return body

        def answer(_info: CommitInfo):
            body = now()
            quiet = (not body["records"] and body["end_leo"] == msg.fetch_leo
                     and not body.get("ops") and "ops_drop" not in body
                     and "ops_reset" not in body and body["ops_hw"] <= msg.ops_applied)
            if quiet and msg.wait_ms > 0:
                return Park(FETCH_PREFIX + msg.topic, msg.wait_ms, now)
            return body
        return read_op(answer)

    def _records_from(self, msg: ReplicaFetch, lead: Leadership) -> dict:
        topic = self.registry.get(msg.topic)
        if topic is None or self.replicas.lead(msg.topic) is not lead:
            raise TopicsError(f"no longer the leader of {msg.topic!r}", ErrorCode.NOT_LEADER)
        budget = min(msg.max_bytes or FETCH_BYTES_MAX, FETCH_BYTES_MAX)
        key = (topic, msg.fetch_leo, budget, msg.frames, topic.head, topic.earliest_seq(),
               topic.evict_floor, topic.expiry_floor, topic.deletions)
        records = lead.records(key, lambda: replica_records.read_for(
            self.reader, topic, msg.fetch_leo, budget, msg.frames))
        body = {**records, "leader_epoch": lead.leader_epoch, "hw": lead.tracker.hw_seq}
        if lead.keys is not None and body["end_leo"] > msg.fetch_leo:
            keys = lead.keys.within(topic, msg.fetch_leo, body["end_leo"], self.stager.clock())
            if keys:
                body["keys"] = keys
        return body

    def epoch_end(self, msg: EpochQuery) -> Staged:
        _lead, topic = self._led(msg.topic, msg.leader_epoch)
        end = topic.epochs.end_for(msg.epoch, topic.head + 1) if msg.epoch is not None else (
            EpochEnd(topic.epochs.latest, topic.head + 1))
        return read_op(lambda info: {"topic": topic.name, "leader_epoch": msg.leader_epoch,
                                     "epoch": end.epoch, "end_leo": end.end_leo})

    def _led(self, name: str, leader_epoch: int) -> tuple[Leadership, TopicState]:
        lead = self.replicas.lead(name)
        topic = self.registry.get(name)
        role = self.replicas.role(name)
        if lead is None or topic is None:
            raise TopicsError(f"not the leader of {name!r}", ErrorCode.NOT_LEADER,
                              role.hint() if role else {"topic": name})
        if leader_epoch != lead.leader_epoch:
            raise TopicsError(f"leader epoch {leader_epoch} is not the current "
                              f"{lead.leader_epoch} of {name!r}", ErrorCode.NOT_LEADER,
                              role.hint())
        return lead, topic
