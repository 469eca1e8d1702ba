"""The log's interpretation: what the WAL's frames mean for a topic.

A shard (serving and recovering) and the compactor (absorbing the WAL into segments) read
the same log and must agree on every rule, so the rules live here, once: the per-topic
state (topic_state), the frame-by-frame reading (topic_ledger), idempotency keys
(dedupe_index), the tag index (tag_index), record deletes (delete_rules) and cap/TTL
retention (retention_rules). Nothing here does I/O of its own or knows about sockets; where
a rule needs a record it calls the reader it is given.
"""
