"""The log's interpretation: what the WAL's frames mean for a topic.

A shard (serving and recovering) and the compactor (absorbing the WAL into segments) read
the same log and must agree on every rule, so the rules live here, once: the per-topic
state (topic_state), the frame-by-frame reading (topic_ledger), idempotency keys
(dedupe_index), the tag index (tag_index), record deletes (delete_rules) and cap/TTL
retention (retention_rules). Nothing here does I/O of its own or knows about sockets; where
a rule needs a record it calls the reader it is given.

Modules:
- `append_run.py`: records of one topic that a reader of the log takes in one step
- `dedupe_index.py`: idempotency of appends for one topic
- `extension_frames.py`: the frames of replication and routers as the topic ledger applies them
- `delete_rules.py`: the rules of permanent record deletes
- `deleted_seqs.py`: the seqs of a topic deleted one by one that its shard must still skip
- `log_truncation.py`: a replica's log cut back to where it agrees with its leader's
- `op_log.py`: a replicated topic's log of record deletes and queue lease events
- `queue_state.py`: the lease state of one queue topic, and how Lease frames change it
- `recovery_audit.py`: the recovery verdict
- `retention_rules.py`: the rules of cap and TTL retention of one topic
- `router_state.py`: one router as its destination's shard keeps it
- `tag_index.py`: a topic's tag index
- `topic_ledger.py`: the one interpretation of the WAL
- `topic_state.py`: one topic's published state inside its shard
"""
