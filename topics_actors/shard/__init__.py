"""The shard actor: owns the topics that hash to it, their seqs, index and WAL group
(docs/ARCHITECTURE.md section 4). Its sub-packages: `replication/`, `queues/`, `routers/`
(each `__init__` names its modules).

Modules:
- `absorption.py`: a shard taking in a durable snapshot
- `batch_stager.py`: one group-commit batch of a shard, and the stager that builds it
- `byte_quota.py`: the node-wide live-bytes quota, shared by every shard
- `checkpoint_window.py`: whether a checkpoint may be reading this shard's WAL now
- `commit_publisher.py`: the shard's side of the commit feed
- `commit_window.py`: how long a turn gathers fsync-class writes before it commits
- `diff_read.py`: the diff read of spec/api.md 5.6
- `head_board.py`: the topics whose caught-up reads the head table answers
- `head_marks.py`: exact head marks
- `lane_links.py`: lanes from a shard to the node's other shards (the router feed's reads)
- `lane_listener.py`: the shard's end of the lanes
- `long_poll.py`: parked diff reads
- `peer_sockets.py`: DEALER sockets from a shard to other shards, opened on first use
- `quarantine_book.py`: the shard's quarantined topics
- `ram_buffer.py`: an ephemeral topic's records in memory
- `range_scan.py`: the bulk range read
- `copy_checksum.py`: a digest of this copy of a topic over a seq range
- `record_append.py`: an append in a shard's batch
- `record_delete.py`: a delete_records request in a shard's batch
- `record_reader.py`: where a shard reads one record of a topic
- `replay.py`: recovery of one shard
- `request_intake.py`: requests taken from the sockets and lanes into the core
- `reply_desk.py`: the answering side of a commit, and the replies that wait
- `retention.py`: cap and TTL retention in a shard's batch
- `shard_core.py`: the shard's pure core
- `shard_server.py`: the shard's socket shell
- `shard_stats.py`: a shard's counters, reported by status
- `stream_leases.py`: SSE streams that belong to no watch session
- `topic_admin.py`: topic requests in a shard's batch
- `topic_registry.py`: the topics a shard serves
- `wal_file_set.py`: the WAL files a shard reads and writes
- `watch_sessions.py`: watch sessions, kept by the shard their id hashes to
"""
