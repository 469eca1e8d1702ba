"""The leader's ISR and high-watermark rules (cluster/isr_tracker.py), driven by a fake
monotonic clock: HW = min durable leo over the ISR, only with min_isr members, never back;
shrink on lag, no flapping under steady writes, expand at the HW (at the leader's leo while
below min_isr) holding every committed op, maximal ISR while a change is being written;
acks=all waiters."""

from topics_actors.cluster.isr_tracker import AckWaiters, IsrTracker

LAG_MS = 1000


def tracker(isr=("a", "b", "c"), min_isr=2, leader_leo=1, hw_leo=1, epoch_start=1):
    return IsrTracker("a", ("a", "b", "c"), isr, min_isr, LAG_MS, epoch_start, leader_leo,
                      hw_leo, now_ms=0)


def test_hw_is_the_smallest_durable_leo_over_the_isr():
    t = tracker()
    assert not t.leader_committed(11)            # followers still at 1
    assert t.fetched("b", 6, 10) is False        # c holds it back
    assert t.fetched("c", 4, 10) and t.hw_seq == 3
    assert t.fetched("c", 11, 20) and t.hw_seq == 5
    assert t.fetched("b", 11, 20) and t.hw_seq == 10
    assert not t.fetched("b", 7, 30) and t.hw_seq == 10    # never goes back


def test_no_hw_progress_below_min_isr_and_all_writes_refused():
    t = tracker(isr=("a",), min_isr=2)
    assert not t.can_ack_all()
    t.leader_committed(5)
    assert t.hw_seq == 0
    lone = tracker(isr=("a",), min_isr=1)
    assert lone.can_ack_all() and lone.leader_committed(5) and lone.hw_seq == 4


def test_a_lagging_follower_is_shrunk_after_the_lag_time():
    t = tracker()
    t.leader_committed(11)
    t.fetched("b", 11, 100)
    t.fetched("c", 3, 100)
    assert t.proposal(900) is None
    t.fetched("b", 11, 1500)
    assert t.proposal(1500) == ("a", "b")        # c not caught up since 0
    assert t.hw_seq == 2                         # c still counted until the write lands
    assert t.isr_written(("a", "b")) and t.hw_seq == 10


def test_steady_writes_do_not_make_a_keeping_up_follower_flap():
    t = tracker(isr=("a", "b"), min_isr=1)
    now, leo = 0, 1
    for _ in range(50):                          # the leader is always a bit ahead
        now += 200
        t.fetched("b", leo, now)                 # b reached where the leader was last time
        leo += 10
        t.leader_committed(leo)
        assert t.proposal(now) is None           # b stays, c (never fetched) stays out
    assert t.isr == ("a", "b") and t.proposal(now) is None


def test_expansion_needs_the_hw_and_the_epoch_start():
    t = tracker(isr=("a", "b"), leader_leo=20, hw_leo=20, epoch_start=15)
    t.ops_fetched("c", 1)                        # its fetches report no ops (none exist)
    t.fetched("c", 12, 10)
    assert t.proposal(10) is None                # below the HW and the epoch start
    t.fetched("c", 20, 20)
    assert t.proposal(20) == ("a", "b", "c")
    t.leader_committed(25)
    t.fetched("b", 25, 30)
    assert not t.fetched("b", 25, 31) and t.hw_seq == 19   # c (joining) is counted at once
    assert t.fetched("c", 25, 32) and t.hw_seq == 24


def test_below_min_isr_a_replica_joins_only_at_the_leaders_leo():
    t = tracker(isr=("a",), min_isr=2, leader_leo=30, hw_leo=10)
    t.ops_fetched("b", 1)
    t.fetched("b", 20, 10)
    assert t.proposal(10) is None                # at the HW, but the leader is at 30
    t.fetched("b", 30, 20)
    assert t.proposal(20) == ("a", "b")
    assert t.isr_written(("a", "b")) and t.hw_seq == 29


def test_a_replica_joins_only_holding_every_committed_op():
    """An op (a delete, an ack) committed while a follower was out of the ISR: caught up on
    records alone, it stays out (elected, it would serve what the delete removed) until its
    fetches report the op held."""
    t = tracker(isr=("a", "b"), min_isr=1, leader_leo=11, hw_leo=11)
    t.start_ops(1, 0)
    t.ops_fetched("b", 1)
    t.ops_fetched("c", 1)
    assert t.leader_ops_durable(2) is False       # op 1 logged; b holds it back
    assert t.ops_fetched("b", 2) and t.ops_hw == 1    # committed without c
    t.fetched("c", 11, 10)                        # c has every record, not op 1
    assert t.proposal(10) is None
    assert t.ops_fetched("c", 2) is False         # c holds op 1 now
    assert t.proposal(20) == ("a", "b", "c")


def test_ack_waiters_release_in_seq_order_and_are_bounded():
    waiters = AckWaiters(max_waiting=3)
    assert waiters.add(5, "w5") and waiters.add(2, "w2") and waiters.add(9, "w9")
    assert not waiters.add(1, "w1")
    assert waiters.released(4) == ["w2"]
    assert waiters.released(9) == ["w5", "w9"]
    waiters.add(20, "w20")
    assert waiters.drain() == ["w20"] and len(waiters) == 0
