"""A shard's part in replication (docs/CLUSTER.md, docs/ARCHITECTURE.md section 8): for each
replicated topic it owns, this node leads it, follows it, or only knows where it is led.

- `replica_book.py`: the roles from the supervisor applied (copies made, leading and
  following started and stopped), and what a commit wakes and lets go.
- `replica.py`: this shard's replica of each topic (its Role, and a Leadership or a
  Followership), indexed by what it does (ReplicaKind).
- `placement.py`: what the shard waits on from the cluster (a placement with its
  PlacementState, a config change, a deletion).
- `leader_duties.py`: the leader's side: leading started and stopped, the high
  watermark, `acks: all`, ops logged and applied, ISR proposals.
- `fetch_answers.py`: the leader's answers to its followers' fetches and epoch queries.
- `follower_duties.py`: the follower's side: its next requests, answers applied at the
  leader's seqs, a diverged copy cut or fetched anew.
- `replica_rules.py`: which requests a cluster node takes for a topic; its handler table.
- `replica_role.py`: one topic's replication state as the supervisor sent it; Acks and
  AnswerKind, the closed sets that cross the wire.
- `replica_ops.py`: record deletes and queue events as ops, applied by every replica once
  every in-sync replica holds them.
- `replica_records.py`: reading records for a fetch, and appending fetched ones.
- `replica_frames.py`: the leader's Append frames for a fetch, checked by the follower.
- `replica_keys.py`: idempotency and session keys that travel with the records (the
  leader's KeyTrail, a fetch answer's keys, the follower's dedupe index), so a retry
  through a new leader gets its original seqs.
- `replica_cut.py`: cutting a diverged copy back in place, or fetching it anew.
- `replica_report.py`: what a shard tells of its replicated topics.
- `replica_fetcher.py` (shell): the follower's fetches, one DEALER per leader shard.
"""
