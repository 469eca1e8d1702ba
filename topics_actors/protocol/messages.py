"""Request kinds between clients (library, gateway) and shards or the node's front.

Every kind is answered by exactly one "reply" or "error" envelope with the same corr.
Result maps use the field names of the /v0 HTTP API. Times are epoch milliseconds.
"""

from __future__ import annotations

from typing import Any

from topics_actors.limits import LIST_PAGE_SIZE_DEFAULT
from topics_actors.protocol.envelope import Message, message
from topics_actors.topic_config import Acks


@message
class Append(Message):
    """client -> shard. Append a batch to `topic`, all or nothing, contiguous seqs.

    records: list of [data bin (JSON bytes), tag str|nil, node str|nil, meta bin|nil]; or,
    for plain records (data alone), the array form: one bin holding a JSON array whose
    elements are the records' datas (compact, as orjson writes it, is what a shard takes in
    one step; it keeps each data's bytes; any other array is parsed and written again);
    node: default node of the batch; idempotency_key: a retry with the same key within the
    topic's window returns the original seqs (deduped: true); create/config: whether and how
    a missing topic is created; return_seqs: include `seqs`; prevalidated: the sender wrote
    every data as JSON itself (the gateway), so the shard need not parse it; honoured only
    on the shard's ipc endpoint, ignored on TCP (every limit is checked either way).
    acks (a replicated topic, docs/CLUSTER.md): "none" | "leader" | "all" (nil = "all"):
    answer once the leader's own log holds the batch in its class ("none" and "leader"), or
    once every in-sync replica does ("all", refused not_enough_replicas while fewer than the
    topic's min_isr are in sync); ignored on a topic of one copy.
    Reply: {topic, first_seq, last_seq, seqs?, head_seq, count, created, deduped, performance}.
    """
    KIND = "append"
    topic: str
    records: list | bytes
    node: str | None = None
    idempotency_key: str | None = None
    create: bool | None = None
    config: dict | None = None
    return_seqs: bool = True
    prevalidated: bool = False
    acks: Acks | None = None


@message
class Diff(Message):
    """client -> shard. Read records after cursor `from_seq` (exclusive).

    limit: records (0 = 256, at most 1000); node: a reader node or list of nodes whose own
    records are skipped; max_batch_bytes: payload budget (0 = 1 MiB); wait_ms: long-poll for an
    append when caught up (at most 30000).
    Reply: {topic, records: [[seq, ts, envelope bin, tag|nil, node|nil, has_meta bool]],
    next_from_seq, head_seq, earliest_seq, caught_up, tombstone, lag, records_scanned,
    performance}. The envelope is the stored JSON {"d": data, "m": meta}, "m" exactly when
    has_meta (topics_actors/record_envelope.py splits it); the receiver drops "m" when it
    asked for include_meta false. Tags are nil unless include_tags. include_hops (a router's
    read) adds a 7th item to each record: how many routers it has passed through. Negative
    numbers and a malformed node are rejected (invalid_request).
    settle: [[router, cursor], ...] routers into `topic` that must have dealt with their
    source up to `cursor` before the read (the gateway's read-your-writes on a routed
    destination, one message instead of a router_sync and a diff); the read waits for them
    up to DIFF_SETTLE_WAIT_MS (limits.py), and without wait_ms. Still unsettled when the
    topic's next publish wakes it, or by then, the reply is {topic, settled: false} and no
    records.
    head_slot (a gateway of the node): the reply adds `head_slot` [incarnation, slot, tid]
    when the shard publishes the topic's head in its head table (protocol/head_table.py),
    where the gateway answers the next caught-up reads itself.
    """
    KIND = "diff"
    topic: str
    from_seq: int = 0
    limit: int = 0
    node: Any = None
    include_tags: bool = False
    include_meta: bool = True
    wait_ms: int = 0
    max_batch_bytes: int = 0
    include_hops: bool = False
    settle: list | None = None
    head_slot: bool = False


@message
class Scan(Message):
    """client -> shard. A bulk read of seqs in (after_seq, until_seq] in columns, for
    analytics (the Spark source): no per-record maps, `data` as raw JSON text.

    until_seq: inclusive end (0 = the head); limit: records (0 = 10000, at most 50000);
    max_batch_bytes: `data` budget (0 = 8 MiB, at most 8 MiB).
    Reply: {topic, count, seqs bin (count int64 LE), ts bin (count int64 LE, ms), data bin
    (the records' data JSON texts concatenated), offsets bin (count + 1 int32 LE into data),
    tags [str|nil], nodes [str|nil], next_from_seq, head_seq, earliest_seq, caught_up,
    tombstone, performance}.
    """
    KIND = "scan"
    topic: str
    after_seq: int = 0
    until_seq: int = 0
    limit: int = 0
    max_batch_bytes: int = 0


@message
class PutTopic(Message):
    """client -> shard. Create or replace the whole config of `topic` (spec/api.md 3, 5.1).
    Reply: {topic, created, config, performance}."""
    KIND = "put_topic"
    topic: str
    config: dict | None = None


@message
class GetTopic(Message):
    """client -> shard. The state of `topic`; touch bumps its read recency.
    Reply: {topic, type, head_seq, earliest_seq, next_seq, count, bytes, config,
    effective_priority, last_write_ts, last_read_ts, queue?, performance}; queue =
    {ready, in_flight, dead_lettered} on queue topics only."""
    KIND = "get_topic"
    topic: str
    touch: bool = True


@message
class ListTopics(Message):
    """client -> shard. Topics of this shard with names > `after` starting with `prefix`,
    name order, at most `limit` (1..1001). Reply: {topics: [{topic, head_seq, earliest_seq,
    count, bytes, durable, effective_priority, durability}], more}."""
    KIND = "list_topics"
    prefix: str = ""
    after: str = ""
    limit: int = LIST_PAGE_SIZE_DEFAULT
    touch: bool = False


@message
class DeleteTopic(Message):
    """client -> shard. Delete `topic` and its records; if_empty refuses a non-empty topic.
    Reply: {topic, deleted, routers_removed, performance}."""
    KIND = "delete_topic"
    topic: str
    if_empty: bool = False


@message
class PutRouter(Message):
    """client -> the shard of `topic`, the router's destination (spec/api.md 6.1). Create
    the router, or update the knobs of an existing one; the caller has checked the node-wide
    rules (cycle, router cap) and created the source. source_head: where a new router's
    cursor starts (no backfill). filter: the match form of a record delete, or nil;
    guarantee: "at_least_once" | "exactly_once". The shard checks the rules local to the
    destination: the destination exists (or create_dest), one source per destination
    (409 topic_exists_incompatible, reason router_dest_fan_in), no repointing (reason
    router_repoint_forbidden). Reply: {router, created, source, dest, preserve_node,
    preserve_tag, filter, allow_cycle, guarantee, forwarded_total, cursor, performance}."""
    KIND = "put_router"
    topic: str
    router: str
    source: str
    source_head: int = 0
    preserve_node: bool = True
    preserve_tag: bool = True
    create_dest: bool = True
    filter: Any = None
    allow_cycle: bool = False
    guarantee: str = "at_least_once"


@message
class ListRouters(Message):
    """client -> every shard. The routers whose destination is in this shard.
    Reply: {routers: [{router, source, dest, preserve_node, preserve_tag, filter,
    allow_cycle, guarantee, forwarded_total, cursor}] (name order), performance}."""
    KIND = "list_routers"


@message
class DeleteRouters(Message):
    """client -> every shard. Delete the router named `router`, and/or every router whose
    source is `source` (a deleted source topic). Reply: {deleted: [names], performance}."""
    KIND = "delete_routers"
    router: str | None = None
    source: str | None = None


@message
class RouterSync(Message):
    """client -> the shard of `topic`, a router's destination. A read that waits: answered
    once router `router`'s cursor has reached `cursor` (a source head the caller saw), or
    after `wait_ms` (at most 30000), or at once when the router is gone. The gateway sends it
    before a read of a routed destination (read-your-writes, docs/HTTP.md 2).
    Reply: {router, cursor, caught_up, performance}."""
    KIND = "router_sync"
    topic: str
    router: str
    cursor: int
    wait_ms: int = 0


@message
class Status(Message):
    """client -> shard or front. Reply from a shard: {shard, shard_count, ready,
    replay_progress, topics, long_polls, statistics, wal_position: [idx, offset],
    snapshot_id}; from the front: the shard map
    {node_ready, replay_progress, shard_count, pid, zmq_port, http_port, shards: [{shard,
    state, pid, incarnation, endpoint, ipc, replay_progress}]}."""
    KIND = "status"


@message
class Checkpoint(Message):
    """compactor -> shard. A checkpoint barrier: the shard commits a fsynced CheckpointMark
    and answers with the WAL position after it; every frame before that position is durable
    and published. Reply: {generation, group, idx, offset, performance} (group is the
    canonical key "<generation:04>/shard-NN" of the shard's WAL group)."""
    KIND = "checkpoint"


@message
class Absorbed(Message):
    """compactor -> shard. Snapshot `snapshot_id` is durable: the shard reads it, serves the
    records it covers from segment files, and removes its own WAL files below the snapshot's
    position for its group. Reply: {snapshot_id, topics, removed_files, performance}."""
    KIND = "absorbed"
    snapshot_id: int


@message
class Retain(Message):
    """reclaimer -> shard. Apply cap and TTL retention to every topic of the shard now (it
    is otherwise applied lazily when a topic is written or read): floors that a TTL or the
    byte cap moves are logged as an fsynced EvictWatermark before they take effect.
    Reply: {topics, performance} (topics = how many had floors to raise)."""
    KIND = "retain"


@message
class DeleteRecords(Message):
    """client -> shard. Permanently delete records of `topic` (spec/api.md 5.7): those with
    seq < before_seq, and/or those whose tag matches `match` (["tag", "Eq", v],
    ["tag", "Glob", "prefix*"] or a bare tag string; a trailing "*" makes it a Glob). At
    least one of the two is required. Bounded by the head at call time; silent (deletes
    never produce a tombstone). Reply: {topic, deleted, earliest_seq, head_seq, count,
    bytes, performance}."""
    KIND = "delete_records"
    topic: str
    before_seq: int | None = None
    match: Any = None


@message
class WatchCreate(Message):
    """gateway -> the shard owning `wid` (routed as if `wid` were a topic name). Keep a
    watch session (spec/api.md 7.1) in the shard's memory; sessions are lost when that
    shard restarts. owner: the creating key's identity (a hex hash; "" when auth is off);
    cursors: {topic: seq}; options: the session's read options {node, limit,
    max_batch_bytes, heartbeat_ms, include_meta, include_tags, include_data}.
    Reply: {wid, performance}."""
    KIND = "watch_create"
    wid: str
    owner: str
    cursors: dict
    options: dict


@message
class WatchOpen(Message):
    """gateway -> the shard owning `wid`. Open stream `stream` on the session: owner is the
    identity of the key the stream presented ("" for none or an invalid one); a session with
    an owner answers `unauthorized` unless it matches. rewind ({topic: seq}, a Last-Event-ID)
    lowers cursors only. The stream counts as open for lease_ms unless renewed.
    Reply: {wid, owner, cursors, options, performance}; `not_found` for an unknown wid."""
    KIND = "watch_open"
    wid: str
    stream: str
    owner: str
    lease_ms: int
    rewind: dict | None = None


@message
class WatchCursor(Message):
    """gateway -> the shard owning `wid`. Stream `stream` has delivered up to `cursors`:
    store them as the session's cursor map, renew the stream's lease for lease_ms; closed:
    the stream has ended. Reply: {wid, performance}; `not_found` for an unknown wid."""
    KIND = "watch_cursor"
    wid: str
    stream: str
    cursors: dict
    lease_ms: int = 0
    closed: bool = False


@message
class Claim(Message):
    """client -> shard. Lease up to `max` ready jobs of queue `topic` to `node` (spec/api.md
    8): reclaimed jobs first (lowest seq), then new ones in seq order.

    max: jobs (0 = 1, at most 1000); lease_ms: visibility timeout (nil = the topic's
    lease_ms; clamped to [100, 86400000]). A job past the topic's max_deliveries moves to its
    dead_letter topic instead. A missing topic is topic_not_found, a log topic not_a_queue,
    then an empty or too long node invalid_request.
    Reply: {topic, claimed: [[seq, lease_id str, deadline ms, ts, envelope bin, tag|nil,
    deliveries, has_meta]], count, ready, performance}; envelope and has_meta as in diff.
    """
    KIND = "claim"
    topic: str
    node: str
    max: int = 1
    lease_ms: int | None = None


@message
class Ack(Message):
    """client -> shard. `node` is done with jobs `seqs` of queue `topic`: each one it holds
    (and whose lease id matches the same index of `lease_ids`, when given and not "") is
    deleted for good; the others are skipped (never an error).

    seqs: at most 1000 (else batch_too_large, detail {seqs, max}); lease_ids: empty, or as
    many "lease_<hex>" (or "") as seqs. Field checks precede topic_not_found / not_a_queue.
    Reply: {topic, acked: count, acked_seqs: [seq], skipped: [seq], ready, in_flight,
    performance}.
    """
    KIND = "ack"
    topic: str
    node: str
    seqs: list
    lease_ids: list | None = None


@message
class Nack(Message):
    """client -> shard. Give held jobs `seqs` back: claimable now, or after `delay_ms`
    (at most 86400000); their delivery counts stay. Checks as for ack.
    Reply: {topic, nacked: count, nacked_seqs: [seq], skipped: [seq], ready, in_flight,
    performance}.
    """
    KIND = "nack"
    topic: str
    node: str
    seqs: list
    delay_ms: int = 0
    lease_ids: list | None = None


@message
class Extend(Message):
    """client -> shard. Set the deadline of held jobs `seqs` to now + lease_ms (clamped to
    [100, 86400000]); expired leases are skipped. Checks as for ack.
    Reply: {topic, extended: count, extended_seqs: [seq], skipped: [seq],
    deadlines: {"<seq>": deadline ms}, performance}.
    """
    KIND = "extend"
    topic: str
    node: str
    seqs: list
    lease_ms: int
    lease_ids: list | None = None


@message
class Held(Message):
    """gateway -> shard. Which of jobs `seqs` of queue `topic` does `node` still hold (with
    the lease of the same index of `lease_ids`, when given and not "")? A read: a `/work`
    stream (spec/api.md 8) asks before it claims, so a job the client acked, or whose lease
    ran out, frees its slot. Checks: topic_not_found, not_a_queue, then as for ack.
    Reply: {topic, held: [seq], performance}.
    """
    KIND = "held"
    topic: str
    node: str
    seqs: list
    lease_ids: list | None = None


@message
class StreamLease(Message):
    """gateway -> the shard owning `stream` (routed as if it were a topic name). Count SSE
    stream `stream`, which belongs to no watch session (a queue's `/work` stream, a
    WebSocket), as open for lease_ms (renewed by sending this again); closed: it has ended.
    owner: the identity of its key, as for watch_open ("" without auth). A read, memory
    only.
    Reply: {stream, performance}."""
    KIND = "stream_lease"
    stream: str
    owner: str
    lease_ms: int = 0
    closed: bool = False


@message
class RepairTopic(Message):
    """admin -> shard. Repair `topic`, which recovery quarantined (docs/OPERATIONS.md,
    recovery quarantine): the log is cut back to the topic's last valid record durably (a
    restart does not quarantine it again), then the topic serves. Errors: not_found when it
    is not quarantined; internal (corruption) when the damage has no automatic repair.
    Reply: {topic, repaired: true, lost_records, performance}."""
    KIND = "repair_topic"
    topic: str


@message
class Checksum(Message):
    """client -> shard. A digest of this node's copy of `topic` over [from_seq, to_seq]
    (docs/CLUSTER.md 9): xxh3-64 of each stored record's seq, ts, envelope, tag and node.
    Answered by any copy, leader or follower, for itself. `from_seq` is raised to the
    copy's earliest seq; `to_seq` 0 means its high watermark, and it is lowered to the
    copy's log end; at most 100,000 seqs per request. Reply: {topic, from_seq, to_seq,
    records, checksum (16 hex digits), next_from_seq (null when the range is done),
    until_seq (where the whole range ends), head_seq, hw, performance}."""
    KIND = "checksum"
    topic: str
    from_seq: int = 0
    to_seq: int = 0


@message
class Reassign(Message):
    """admin -> a cluster node's front (docs/CLUSTER.md 8). Move `topic`'s copies onto the
    nodes `replicas` (as many as it has copies; the first is preferred as leader), or, with
    `drain`, every topic's copy off that node. The target is stored in each topic's state
    in ZooKeeper and the controller carries the move out (cluster/reassignment.py); the
    reply comes once the targets are stored, not when the moves are done. Errors:
    invalid_request, topic_not_found, not_enough_replicas (a node not live; no free node for
    a drained copy), not_found (the node is not in a cluster).
    Reply: {moves: [{topic, replicas, target}]}."""
    KIND = "reassign"
    topic: str | None = None
    replicas: list | None = None
    drain: str | None = None


@message
class ReplicaFetch(Message):
    """follower shard -> the leader's shard (docs/CLUSTER.md). Records of replicated `topic`
    from `fetch_leo`, the follower's durable log end, which also reports its progress;
    parked up to wait_ms when there is nothing new. Refused not_leader when the receiver
    does not lead `topic` in `leader_epoch`.
    ops_leo, ops_epoch, ops_applied: the follower's durable op log end (record deletes,
    ledger/op_log.py), the epoch of its newest op not applied yet, and how many it applied.
    frames: the follower takes the records still in the leader's WAL as the leader's own
    Append frames (a leader that does not know the field ignores it: records only).
    Reply: {topic, leader_epoch, first_seq, end_leo, records: [[seq, ts, envelope bin,
    tag|nil, node|nil, flags]], frames?: bin (only when asked: whole WAL Append frames of
    the topic one after the other, seqs ascending, all after the records), epochs:
    [[epoch, first seq]], hw, earliest_seq, floors: [evict_floor, expiry_floor] (the
    leader's retention), ops_applied, and ops: [[no, epoch, op]] with ops_hw, or ops_drop
    (with ops_hw), or ops_reset}; seqs in [first_seq, end_leo) without a record or frame
    are holes (deleted, evicted or never written)."""
    KIND = "replica_fetch"
    topic: str
    node: str
    leader_epoch: int
    fetch_leo: int
    wait_ms: int = 0
    max_bytes: int = 0
    ops_leo: int = 1
    ops_epoch: int | None = None
    ops_applied: int = 0
    frames: bool = False


@message
class EpochQuery(Message):
    """follower shard -> the leader's shard. Where did `epoch` (the follower's latest leader
    epoch, nil: none) end in the leader's log (KIP-279)? Refused not_leader as a fetch is.
    Reply: {topic, leader_epoch, epoch|nil, end_leo|nil}."""
    KIND = "epoch_query"
    topic: str
    node: str
    leader_epoch: int
    epoch: int | None = None
