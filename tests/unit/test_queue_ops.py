"""Queues in a shard, without sockets (spec/api.md 8): claim, ack, nack, extend, fencing,
expiry and redelivery, max_deliveries and dead letters, the `queue` counters, and every
error of the shard's checks.

Method: a ShardHarness with an injected clock (tests move time by hand, so visibility
timeouts and nack delays are exact, never slept for).
"""

from __future__ import annotations

import orjson
import pytest

from tools.testing.manual_clock import ManualClock
from topics_actors.errors import TopicsError
from topics_actors.protocol import decode_reply
from topics_actors.protocol.messages import (
    Ack, Append, Claim, DeleteRecords, DeleteTopic, Diff, Extend, Nack,
)
from topics_actors.shard.queues.dead_letter_moves import MoveDone
from topics_actors.topic_identity import shard_of_name



def rec(data: bytes = b'{"x":1}', tag=None, node=None, meta=None) -> list:
    return [data, tag, node, meta]


def code(reply) -> str:
    assert isinstance(reply, TopicsError), reply
    return reply.code.wire


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def q(env, clock):
    harness = env.single(clock=clock)
    harness.put("q", type="queue", lease_ms=1000)
    for n in range(1, 6):
        harness.append("q", rec(b"%d" % n, tag=f"t{n}", node="producer"))
    yield harness
    if harness.core is not None:
        harness.crash()


def claim(h, node="w1", max=1, **kw) -> dict:
    return h.call(Claim("q", node, max, **kw))


def seqs(reply: dict) -> list[int]:
    return [job[0] for job in reply["claimed"]]


def queue(h, topic: str = "q") -> dict:
    return h.get(topic)["queue"]


# --- claim ---------------------------------------------------------------------------------

def test_claim_leases_in_seq_order_with_ids_deadlines_and_deliveries(q, clock):
    reply = claim(q, max=2)
    assert reply["count"] == 2 and reply["ready"] == 3
    (s1, id1, d1, ts1, env1, tag1, n1, meta1), (s2, id2, *_rest) = reply["claimed"]
    assert (s1, s2) == (1, 2) and (id1, id2) == ("lease_1", "lease_2")
    assert d1 == clock.now + 1000 and n1 == 1 and tag1 == "t1" and env1 == b'{"d":1}'
    assert meta1 is False
    assert seqs(claim(q, max=10)) == [3, 4, 5]
    assert claim(q)["count"] == 0
    assert queue(q) == {"ready": 0, "in_flight": 5, "dead_lettered": 0}


def test_claim_max_and_lease_ms_are_clamped(q, clock):
    assert claim(q, max=0)["count"] == 1                      # 0 means 1
    assert claim(q, lease_ms=5)["claimed"][0][2] == clock.now + 100
    assert claim(q, lease_ms=10**12)["claimed"][0][2] == clock.now + 86_400_000
    assert claim(q, max=5000)["count"] == 2


def test_lease_ids_are_lowercase_hex(q):
    q.append("q", *[rec()] * 10)
    ids = [job[1] for job in claim(q, max=11)["claimed"]]
    assert ids[9:11] == ["lease_a", "lease_b"]


def test_expired_lease_is_redelivered_lowest_first(q, clock):
    claim(q, max=3)
    clock.now += 1001
    assert queue(q)["in_flight"] == 0 and queue(q)["ready"] == 5
    reply = claim(q, node="w2", max=2)
    assert seqs(reply) == [1, 2] and [j[6] for j in reply["claimed"]] == [2, 2]
    assert q.call(Ack("q", "w1", [1, 2, 3]))["skipped"] == [1, 2, 3]


def test_lease_at_its_deadline_is_still_held(q, clock):
    claim(q)
    clock.now += 1000
    assert q.call(Ack("q", "w1", [1]))["acked_seqs"] == [1]


# --- ack, nack, extend ------------------------------------------------------------------------

def test_ack_deletes_the_job_silently(q):
    claim(q, max=2)
    reply = q.call(Ack("q", "w1", [1, 2, 9]))
    assert (reply["acked"], reply["acked_seqs"], reply["skipped"]) == (2, [1, 2], [9])
    assert (reply["ready"], reply["in_flight"]) == (3, 0)
    info = q.get("q")
    assert info["count"] == 3 and info["earliest_seq"] == 3 and info["head_seq"] == 5
    assert [r[0] for r in q.records("q")] == [3, 4, 5]
    assert q.call(Ack("q", "w1", [1]))["skipped"] == [1]      # a repeat is a no-op
    assert seqs(claim(q, max=5)) == [3, 4, 5]


def test_an_ack_deletes_the_jobs_it_claimed_without_reading_them_again(q, monkeypatch):
    size = q.get("q")["bytes"] // 5                           # five jobs of one size
    claim(q, max=2)
    reads, read = [], q.core.reader.read
    monkeypatch.setattr(q.core.reader, "read", lambda t, seq: reads.append(seq) or read(t, seq))
    assert q.call(Ack("q", "w1", [1, 2]))["acked_seqs"] == [1, 2]
    assert reads == []                                       # the sizes came with the leases
    info = q.get("q")
    assert (info["count"], info["bytes"]) == (3, 3 * size)
    assert [r[0] for r in q.records("q")] == [3, 4, 5]


def test_a_job_deleted_while_leased_is_not_taken_off_the_counts_twice(q):
    size = q.get("q")["bytes"] // 5
    claim(q, max=2)
    assert q.call(DeleteRecords("q", match="t1"))["deleted"] == 1
    assert q.call(Ack("q", "w1", [1, 2]))["acked_seqs"] == [1, 2]
    info = q.get("q")
    assert (info["count"], info["bytes"]) == (3, 3 * size)


def test_only_the_holder_may_ack_and_a_stale_lease_is_fenced(q, clock):
    first = claim(q)["claimed"][0][1]
    assert q.call(Ack("q", "w2", [1]))["skipped"] == [1]
    clock.now += 1001
    second = claim(q)["claimed"][0][1]                        # same node, new lease
    assert q.call(Ack("q", "w1", [1], [first]))["skipped"] == [1]
    assert q.call(Ack("q", "w1", [1], [second]))["acked_seqs"] == [1]


def test_empty_lease_id_means_no_fence(q):
    claim(q, max=2)
    assert q.call(Ack("q", "w1", [1, 2], ["", "lease_2"]))["acked_seqs"] == [1, 2]


def test_nack_now_and_with_delay(q, clock):
    claim(q, max=2)
    reply = q.call(Nack("q", "w1", [1, 2], delay_ms=500))
    assert (reply["nacked"], reply["nacked_seqs"]) == (2, [1, 2])
    assert (reply["ready"], reply["in_flight"]) == (3, 0)
    assert seqs(claim(q, max=5)) == [3, 4, 5]
    clock.now += 499
    assert claim(q)["count"] == 0
    clock.now += 1
    again = claim(q, max=5)
    assert seqs(again) == [1, 2] and [j[6] for j in again["claimed"]] == [2, 2]
    assert q.call(Nack("q", "w1", [1]))["nacked_seqs"] == [1]
    assert seqs(claim(q)) == [1]


def test_extend_sets_the_deadline(q, clock):
    claim(q, max=2)
    clock.now += 900
    reply = q.call(Extend("q", "w1", [1, 3], 5000))
    assert (reply["extended"], reply["extended_seqs"], reply["skipped"]) == (1, [1], [3])
    assert reply["deadlines"] == {"1": clock.now + 5000}
    clock.now += 200                    # seq 2 expired, seq 1 extended
    assert q.call(Extend("q", "w1", [2], 5000))["skipped"] == [2]
    assert queue(q)["in_flight"] == 1
    assert q.call(Ack("q", "w1", [1]))["acked_seqs"] == [1]


# --- dead letters ------------------------------------------------------------------------------

def test_max_deliveries_moves_the_job_to_the_dead_letter_topic(env, clock):
    h = env.single(clock=clock)
    h.put("q", type="queue", lease_ms=100, max_deliveries=2, dead_letter="dlq")
    h.append("q", rec(b'{"job":1}', tag="t", node="p", meta=b'{"k":"v"}'))
    for _ in range(2):
        assert h.call(Claim("q", "w", 1))["count"] == 1
        clock.now += 101
    third = h.call(Claim("q", "w", 1))
    assert third["count"] == 0
    assert h.get("q")["count"] == 0 and h.get("q")["queue"]["dead_lettered"] == 1
    [(seq, _ts, envelope, tag, node, has_meta)] = h.records("dlq")
    assert has_meta
    body = orjson.loads(envelope)
    assert (seq, tag, node, body["d"]) == (1, "t", "p", {"job": 1})
    assert body["m"] == {"k": "v", "$dead_letter_from": "q",
                         "$dead_letter_deliveries": "2", "$dead_letter_src_seq": "1"}
    h.restart(crash=True)
    assert h.get("q")["queue"]["dead_lettered"] == 1 and h.get("q")["count"] == 0
    assert len(h.records("dlq")) == 1
    h.crash()


def test_without_dead_letter_a_job_is_redelivered_forever(env, clock):
    h = env.single(clock=clock)
    h.put("q", type="queue", lease_ms=100, max_deliveries=1)
    h.append("q", rec())
    for n in range(1, 4):
        assert h.call(Claim("q", "w", 1))["claimed"][0][6] == n
        clock.now += 101
    h.crash()


def test_a_dead_letter_topic_in_another_shard(env, clock):
    """The job is marked moving (logged), survives a crash as such, is sent to the owning
    shard with a key that makes a resend harmless, and leaves the queue on MoveDone."""
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    env.layout(2)
    owner, other = env.shard(0, 2, clock=clock).start(), env.shard(1, 2, clock=clock).start()
    owner.put("q0", type="queue", lease_ms=100, max_deliveries=1, dead_letter=dead)
    assert shard_of_name("q0", 2) == 0
    owner.append("q0", rec(b'{"job":1}', tag="t"))
    owner.call(Claim("q0", "w", 1))
    clock.now += 101
    assert owner.call(Claim("q0", "w", 1))["count"] == 0
    assert owner.get("q0")["queue"] == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    assert not owner.exists(dead) and owner.get("q0")["count"] == 1
    owner.restart(crash=True)                               # the mark survives
    moves = owner.core.queues.moves
    assert moves.pending() == {("q0", 1)}
    assert owner.call(Claim("q0", "w", 1))["count"] == 0
    move = moves.move_request(("q0", 1))
    assert other.call(move)["deduped"] is False
    assert other.call(move)["deduped"] is True              # a resend is harmless
    owner.call(MoveDone("q0", 1))
    assert moves.pending() == set()
    assert owner.get("q0")["queue"]["dead_lettered"] == 1 and owner.get("q0")["count"] == 0
    owner.restart(crash=True)
    assert owner.core.queues.moves.pending() == set()
    assert owner.get("q0")["queue"]["dead_lettered"] == 1 and owner.get("q0")["count"] == 0
    [(_seq, _ts, envelope, tag, _node, _has_meta)] = other.records(dead)
    assert tag == "t" and orjson.loads(envelope)["m"]["$dead_letter_from"] == "q0"
    owner.crash()
    other.crash()


def test_a_move_without_a_dead_letter_topic_any_more_gives_the_job_back(env, clock):
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    env.layout(2)
    owner = env.shard(0, 2, clock=clock).start()
    owner.put("q0", type="queue", lease_ms=100, max_deliveries=1, dead_letter=dead)
    owner.append("q0", rec())
    owner.call(Claim("q0", "w", 1))
    clock.now += 101
    owner.call(Claim("q0", "w", 1))
    owner.put("q0", type="queue", lease_ms=100)
    moves = owner.core.queues.moves
    assert moves.move_request(("q0", 1)) is None and moves.pending() == set()
    assert owner.call(Claim("q0", "w", 1))["claimed"][0][6] == 2
    owner.crash()


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("msg,wire", [
    (Claim("absent", "w"), "topic_not_found"),
    (Claim("log", "w"), "not_a_queue"),
    (Claim("absent", ""), "topic_not_found"),         # 404/409 precede the node check
    (Claim("q", ""), "invalid_request"),
    (Claim("q", "n" * 129), "invalid_request"),
    (Ack("absent", "", [1]), "invalid_request"),      # field checks precede 404
    (Ack("q", "w", list(range(1001))), "batch_too_large"),
    (Ack("q", "w", [1, 2], ["lease_1"]), "invalid_request"),
    (Ack("q", "w", [1], ["lease_xyz"]), "invalid_request"),
    (Ack("q", "w", [1], ["job_1"]), "invalid_request"),
    (Ack("absent", "w", [1]), "topic_not_found"),
    (Ack("log", "w", [1]), "not_a_queue"),
    (Nack("log", "w", [1]), "not_a_queue"),
    (Extend("absent", "w", [1], 100), "topic_not_found"),
    (Extend("q", "w", [-1], 100), "invalid_request"),
])
def test_errors(q, msg, wire):
    q.append("log", rec())
    reply = q.batch(msg)[0]
    assert code(reply) == wire
    if wire == "batch_too_large":
        assert reply.detail == {"seqs": 1001, "max": 1000}


def test_diff_of_a_queue_has_no_side_effects(q):
    claim(q)
    assert [r[0] for r in q.call(Diff("q", 0))["records"]] == [1, 2, 3, 4, 5]
    assert queue(q) == {"ready": 4, "in_flight": 1, "dead_lettered": 0}


def test_log_topics_have_no_queue_counters(q):
    q.append("log", rec())
    assert "queue" not in q.get("log")


def test_claims_in_one_batch_never_share_a_job(q):
    replies = q.batch(Claim("q", "a", 2), Claim("q", "b", 2), Append("q", [rec()]),
                      Claim("q", "c", 5))
    assert [seqs(r) for r in (replies[0], replies[1], replies[3])] == [[1, 2], [3, 4], [5]]


def test_a_dead_letter_topic_moved_to_another_shard_is_never_created_here(env, clock):
    """A restart with another shard count can split a queue from its dead-letter topic:
    the job is then moved through the other shard, no stray topic is created here."""
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    queue_name = next(f"q{i}" for i in range(100) if shard_of_name(f"q{i}", 2) == 0)
    h = env.single(clock=clock)
    h.put(queue_name, type="queue", lease_ms=100, max_deliveries=1, dead_letter=dead)
    h.append(queue_name, rec())
    h.crash()
    env.layout(2)
    owner = env.shard(0, 2, clock=clock).start()
    assert owner.call(Claim(queue_name, "w", 1))["count"] == 1
    clock.now += 101
    assert owner.call(Claim(queue_name, "w", 1))["count"] == 0
    assert not owner.exists(dead)
    assert owner.core.queues.moves.pending() == {(queue_name, 1)}
    owner.crash()


def test_jobs_gone_by_retention_are_forgotten(env, clock):
    h = env.single(clock=clock)
    h.put("q", type="queue", lease_ms=100, cap_records=10)
    h.append("q", *[rec()] * 100)
    for _ in range(10):
        h.call(Claim("q", "w", 10))
        h.append("q", *[rec()] * 10)                 # evicts what was claimed
    state = h.core.registry.get("q").queue
    h.call(Claim("q", "w", 1))
    assert len(state.deliveries) + len(state.leases) <= 2 * 10 + 64 + 1
    assert h.get("q")["queue"]["in_flight"] <= 10
    h.crash()


def test_a_pending_move_survives_a_checkpoint(env, clock):
    dead = next(f"d{i}" for i in range(100) if shard_of_name(f"d{i}", 2) == 1)
    env.layout(2)
    shards = [env.shard(0, 2, clock=clock).start(), env.shard(1, 2, clock=clock).start()]
    owner = shards[0]
    owner.put("q0", type="queue", lease_ms=100, max_deliveries=1, dead_letter=dead)
    owner.append("q0", rec(), rec())
    owner.call(Claim("q0", "w", 2))
    clock.now += 101
    owner.call(Claim("q0", "w", 1))                      # both jobs start moving
    env.checkpoint(shards)
    owner.append("q0", rec())
    env.checkpoint(shards)
    owner.restart(crash=True)
    assert owner.core.queues.moves.pending() == {("q0", 1), ("q0", 2)}
    assert owner.get("q0")["queue"] == {"ready": 1, "in_flight": 0, "dead_lettered": 0}
    owner.call(MoveDone("q0", 2))
    env.checkpoint(shards)
    owner.restart(crash=True)
    assert owner.core.queues.moves.pending() == {("q0", 1)}
    assert [r[0] for r in owner.records("q0")] == [1, 3]
    for h in shards:
        h.crash()


def test_the_expiry_heap_stays_proportional_to_the_leases(q, clock):
    q.append("q", *[rec()] * 300)
    for _ in range(30):
        claimed = seqs(q.call(Claim("q", "w", 10, lease_ms=86_400_000)))
        q.call(Ack("q", "w", claimed))
    state = q.core.registry.get("q").queue
    claim(q)
    assert len(state.expiries) <= 2 * len(state.leases) + 64 + 1


# --- claim coalescing ---------------------------------------------------------------------------

def _answers(h) -> dict:
    """corr -> reply of one commit (parked claims answer nothing)."""
    out = {}
    for _peer, raw in h.core.commit():
        try:
            corr, body = decode_reply(raw)
        except TopicsError as error:
            corr, body = error.corr, error
        out[corr] = body
    return out


def test_claims_in_a_window_are_dealt_round_robin(env, clock):
    h = env.single(clock=clock)
    h.put("cq", type="queue", claim_jitter_ms=50, leases_durable=True)
    h.append("cq", *[rec()] * 5)
    for corr, (node, want) in enumerate((("a", 3), ("b", 1), ("c", 3)), 1):
        h.core.submit(b"peer", corr, Claim("cq", node, want), 0)
    assert _answers(h) == {}                               # all parked
    assert h.core.ms_until_claims() == 50
    clock.now += 49
    h.core.submit_due_claims()
    assert not h.core.has_work()
    clock.now += 1
    h.core.submit_due_claims()
    replies = _answers(h)
    assert set(replies) == {0, 1, 2, 3}                    # 0: the pass itself
    assert [seqs(replies[n]) for n in (1, 2, 3)] == [[1, 4], [2], [3, 5]]
    assert replies[3]["ready"] == 0 and replies[1]["count"] == 2
    h.restart(crash=True)                                  # the pass was logged
    assert h.get("cq")["queue"]["in_flight"] == 5
    h.crash()


def test_a_window_whose_queue_is_gone_refuses_its_claims(env, clock):
    h = env.single(clock=clock)
    h.put("cq", type="queue", claim_jitter_ms=10)
    h.core.submit(b"peer", 1, Claim("cq", "a"), 0)
    _answers(h)
    h.call(DeleteTopic("cq"))
    clock.now += 10
    h.core.submit_due_claims()
    assert _answers(h)[1].code.wire == "topic_not_found"
    h.crash()


def test_a_failed_pass_answers_internal_when_the_park_runs_out(env, clock):
    h = env.single(clock=clock)
    h.put("cq", type="queue", claim_jitter_ms=10, leases_durable=True)
    h.append("cq", rec())
    h.core.submit(b"peer", 1, Claim("cq", "a"), 0)
    _answers(h)
    clock.now += 10
    h.fs.fail("write_at")
    h.core.submit_due_claims()
    assert 1 not in _answers(h)
    [(_peer, raw)] = h.core.release_polls()
    with pytest.raises(TopicsError) as caught:
        decode_reply(raw)
    assert caught.value.code.wire == "internal"
    h.core.submit(b"peer", 2, Claim("cq", "b"), 0)         # a new window
    _answers(h)
    clock.now += 10
    h.core.submit_due_claims()
    assert seqs(_answers(h)[2]) == [1]                     # the failed pass took nothing
    h.crash()


def test_a_job_acked_in_a_batch_is_not_claimed_in_the_same_batch(env, clock):
    """The ack deletes the job's record only once the batch commits; a claim later in the
    same batch must not take it meanwhile. After a restart the claim cursor starts again
    at the first live job, below the jobs whose durable leases came back (found by
    tests/fault/test_queue_kill.py: a job acked, then handed out again with its delivery
    count reset, and acked a second time)."""
    h = env.single(clock=clock)
    h.put("q", type="queue", lease_ms=60_000, leases_durable=True, durability="fsync")
    h.append("q", rec(b"1"), rec(b"2"))
    held = claim(h, "a", max=2)["claimed"]
    h.restart()
    acked, again = h.batch(Ack("q", "a", [j[0] for j in held], [j[1] for j in held]),
                           Claim("q", "b", 5))
    assert acked["acked_seqs"] == [1, 2]
    assert seqs(again) == []
    assert queue(h) == {"ready": 0, "in_flight": 0, "dead_lettered": 0}
    h.crash()
