"""Queue leases across crashes, failed commits and checkpoints (issue 16 part 2).

Method: a ShardHarness with an injected clock. A crash drops the process state (no further
write or sync) and the restart replays the snapshot and WAL; FaultFs makes a commit's write
or fsync fail; env.checkpoint absorbs the WAL into segments and a snapshot, after which the
shard drops the WAL files that held the Lease frames.
"""

from __future__ import annotations

import pytest

from topics_actors.errors import TopicsError
from topics_actors.protocol.messages import Ack, Claim, Extend, Nack
from topics_actors.storage.frame_types import FrameType
from topics_actors.storage.wal_scan import FileScan
from tools.testing.manual_clock import ManualClock
from tests.unit.test_queue_ops import rec, seqs


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def make(env, clock, **config):
    h = env.single(clock=clock)
    h.put("q", type="queue", lease_ms=1000, **config)
    h.append("q", *[rec(b"%d" % n) for n in range(1, 6)])
    return h


def lease_frames(h) -> list:
    out = []
    for _, path in h.wal_files():
        scan = FileScan(h.fs, path)
        out += [f.seq for f in scan.frames() if f.type == FrameType.LEASE]
        scan.close()
    return out


@pytest.mark.parametrize("durable", [False, True])
@pytest.mark.parametrize("durability", ["disk", "fsync"])
def test_an_acked_job_is_never_delivered_again(env, clock, durable, durability):
    h = make(env, clock, leases_durable=durable, durability=durability)
    h.call(Claim("q", "w", 3))
    assert h.call(Ack("q", "w", [1, 3]))["acked_seqs"] == [1, 3]
    h.restart(crash=True)
    assert h.get("q")["count"] == 3
    clock.now += 2000
    assert seqs(h.call(Claim("q", "w", 10))) == [2, 4, 5]
    h.crash()


def test_an_ack_of_a_lease_from_the_log_counts_its_job_off_once(env, clock):
    h = make(env, clock, leases_durable=True)
    size = h.get("q")["bytes"] // 5
    h.call(Claim("q", "w", 2))
    h.restart(crash=True)                  # the leases come back from their frames, unsized
    assert h.call(Ack("q", "w", [1, 2]))["acked_seqs"] == [1, 2]
    info = h.get("q")
    assert (info["count"], info["bytes"]) == (3, 3 * size)
    h.crash()


def test_a_durable_lease_is_kept_until_its_deadline(env, clock):
    h = make(env, clock, leases_durable=True)
    lease = h.call(Claim("q", "w", 2))["claimed"][1][1]
    h.call(Extend("q", "w", [2], 5000))
    h.restart(crash=True)
    assert h.get("q")["queue"] == {"ready": 3, "in_flight": 2, "dead_lettered": 0}
    assert seqs(h.call(Claim("q", "x", 10, lease_ms=9000))) == [3, 4, 5]
    clock.now += 1001                                    # seq 1 expires, 2 was extended
    again = h.call(Claim("q", "x", 10))
    assert seqs(again) == [1] and again["claimed"][0][6] == 2   # deliveries survived
    assert again["claimed"][0][1] not in ("lease_1", "lease_2")  # ids never reused
    assert h.call(Ack("q", "w", [2], [lease]))["acked_seqs"] == [2]   # the fence still holds
    h.crash()


def test_a_memory_only_lease_becomes_claimable_after_a_restart(env, clock):
    h = make(env, clock)
    h.call(Claim("q", "w", 2))
    assert lease_frames(h) == []                         # claims are not logged
    h.restart(crash=True)
    assert h.get("q")["queue"]["in_flight"] == 0
    reply = h.call(Claim("q", "x", 2))
    assert seqs(reply) == [1, 2] and [j[6] for j in reply["claimed"]] == [1, 1]
    h.crash()


def test_a_durable_nack_delay_survives_a_crash(env, clock):
    h = make(env, clock, leases_durable=True)
    h.call(Claim("q", "w", 1))
    h.call(Nack("q", "w", [1], delay_ms=3000))
    h.restart(crash=True)
    assert seqs(h.call(Claim("q", "w", 10, lease_ms=9000))) == [2, 3, 4, 5]
    clock.now += 3000
    assert seqs(h.call(Claim("q", "w", 10))) == [1]
    h.crash()


FAULTS = [("write_at", "eio"), ("sync_data", "eio")]


@pytest.mark.parametrize("op,kind", FAULTS)
def test_a_durable_lease_operation_whose_frame_fails_fails(env, clock, op, kind):
    h = make(env, clock, leases_durable=True, durable=True)
    h.call(Claim("q", "w", 3))
    before = h.get("q")["queue"]
    h.fs.fail(op, kind=kind)
    replies = h.batch(Claim("q", "w", 1), Ack("q", "w", [1]), Nack("q", "w", [2]),
                      Extend("q", "w", [3], 9000))
    assert all(isinstance(r, TopicsError) and r.code.wire == "internal" for r in replies)
    assert h.get("q")["queue"] == before and h.get("q")["count"] == 5
    assert seqs(h.call(Claim("q", "w", 1))) == [4]       # seq 4 was given back
    clock.now += 1001                                    # the extend did not happen
    assert h.call(Ack("q", "w", [1, 2, 3]))["skipped"] == [1, 2, 3]
    assert seqs(h.call(Claim("q", "w", 3))) == [1, 2, 3]  # redelivered, never nacked
    h.crash()


def test_a_failed_ack_keeps_the_job_even_with_memory_only_leases(env, clock):
    h = make(env, clock)
    h.call(Claim("q", "w", 1))
    h.fs.fail("write_at")
    assert h.batch(Ack("q", "w", [1]))[0].code.wire == "internal"
    assert h.get("q")["count"] == 5
    assert h.call(Ack("q", "w", [1]))["acked_seqs"] == [1]
    h.crash()


def test_memory_only_claims_do_not_fail_with_their_batch(env, clock):
    h = make(env, clock)
    h.fs.fail("write_at")
    from topics_actors.protocol.messages import Append
    claimed, appended = h.batch(Claim("q", "w", 1), Append("q", [rec()]))
    assert seqs(claimed) == [1] and appended.code.wire == "internal"
    h.crash()


@pytest.mark.parametrize("durable", [False, True])
def test_queue_state_survives_a_checkpoint_that_drops_the_lease_frames(env, clock, durable):
    h = make(env, clock, leases_durable=durable, max_deliveries=1, dead_letter="dlq")
    h.call(Claim("q", "w", 3))
    h.call(Ack("q", "w", [1]))
    clock.now += 1001
    h.call(Claim("q", "w", 1))         # seqs 2 and 3 move to the dead letters, 4 leased
    h.call(Claim("q", "w", 1))         # 5 leased
    env.checkpoint([h])
    h.append("q", rec(b"6"))
    env.checkpoint([h])                                  # the first WAL files go
    assert h.wal_files()[0][0] > 0
    h.restart(crash=True)
    assert h.get("q")["count"] == 3 and len(h.records("dlq")) == 2
    expected = {"ready": 1, "in_flight": 2, "dead_lettered": 2} if durable else \
        {"ready": 3, "in_flight": 0, "dead_lettered": 2}
    assert h.get("q")["queue"] == expected
    assert [r[0] for r in h.records("q")] == [4, 5, 6]
    assert h.call(Ack("q", "w", [4, 5]))["acked_seqs"] == ([4, 5] if durable else [])
    h.crash()


def test_an_ack_of_an_absorbed_job_flips_its_segment(env, clock):
    """The job is in a segment (first checkpoint), the ack after it: the second checkpoint
    flips the del byte on disk; replay starts after that checkpoint, so only the segment
    can say the job is gone."""
    h = make(env, clock, leases_durable=True)
    env.checkpoint([h])
    h.call(Claim("q", "w", 3))
    h.call(Ack("q", "w", [1, 3]))
    env.checkpoint([h])
    h.restart(crash=True)
    assert [r[0] for r in h.records("q")] == [2, 4, 5] and h.get("q")["count"] == 3
    assert h.get("q")["queue"] == {"ready": 2, "in_flight": 1, "dead_lettered": 0}
    assert seqs(h.call(Claim("q", "x", 5))) == [4, 5]
    h.crash()
