"""A shard's part in replication (docs/CLUSTER.md, docs/ARCHITECTURE.md section 8): for each
replicated topic it owns, this node leads it, follows it, or only knows where it is led.

- `replica_book.py`: the per-topic replicas and the cluster's placements; the roles from
  the supervisor, the leader's side (fetches, the high watermark, `acks: all`) and the
  follower's (fetched records applied at the leader's seqs).
- `replica_rules.py`: which requests a cluster node takes for a topic, its handler table.
- `replica_role.py`: one topic's replication state as the supervisor sent it.
- `replica_ops.py`: record deletes and queue events as ops, applied by every replica once
  every in-sync replica holds them.
- `replica_records.py`: reading records for a fetch, and appending fetched ones.
- `replica_frames.py`: the leader's Append frames for a fetch, checked by the follower.
- `replica_cut.py`: cutting a diverged copy back in place, or fetching it anew.
- `replica_report.py`: what a shard tells of its replicated topics.
- `replica_fetcher.py` (shell): the follower's fetches, one DEALER per leader shard.
"""
