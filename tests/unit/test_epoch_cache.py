"""Epoch-based truncation (cluster/epoch_cache.py) on the failover histories of KIP-101 and
KIP-279: a returning replica truncates exactly where its log and the leader's part, never
at the high watermark, and converges over several failovers. Logs are modelled as lists of
(seq, epoch) so every case also checks that nothing kept differs from the leader."""

import random

import pytest

from topics_actors.cluster.epoch_cache import EpochCache, EpochEnd
from topics_actors.errors import InvariantViolation


class Log:
    """A replica: records (seq -> epoch) and the epoch cache built from them."""

    def __init__(self, epochs: list[int]):
        self.records = {seq: epoch for seq, epoch in enumerate(epochs, start=1)}
        self.cache = EpochCache()
        for seq, epoch in self.records.items():
            self.cache.assign(epoch, seq)

    @property
    def leo(self) -> int:
        return len(self.records) + 1

    def truncate(self, leo: int) -> None:
        self.records = {s: e for s, e in self.records.items() if s < leo}
        self.cache.truncate_to(leo)


def reconcile(follower: Log, leader: Log) -> int:
    """The follower's loop: ask, truncate, until settled; then copy the rest (a fetch)."""
    for _ in range(10):
        asked = follower.cache.latest
        answer = leader.cache.end_for(asked, leader.leo) if asked is not None \
            else EpochEnd(None, 1)
        cut = follower.cache.divergence(answer, asked, follower.leo)
        follower.truncate(cut)
        if follower.cache.settled(answer) or asked is None:
            break
    else:
        raise AssertionError("no convergence")
    kept = follower.leo
    for seq in range(kept, leader.leo):
        follower.records[seq] = leader.records[seq]
        follower.cache.assign(leader.records[seq], seq)
    return kept


def test_assign_keeps_epochs_and_starts_increasing():
    cache = EpochCache([(1, 1), (2, 5)])
    cache.assign(2, 9)                         # same epoch: the first start stands
    assert cache.entries() == [(1, 1), (2, 5)]
    cache.assign(3, 4)                         # contradicts (2, 5): a log rewritten from 4
    assert cache.entries() == [(1, 1), (3, 4)]
    cache.truncate_to(4)
    assert cache.entries() == [(1, 1)] and cache.latest == 1


def test_end_for_answers_the_floor_epoch_and_where_it_ended():
    cache = EpochCache([(2, 1), (4, 7), (6, 12)])
    assert cache.end_for(6, 20) == (6, 20)     # the latest epoch runs to the leo
    assert cache.end_for(9, 20) == (6, 20)
    assert cache.end_for(4, 20) == (4, 12)
    assert cache.end_for(5, 20) == (4, 12)     # never had 5: the floor, ended at 12
    assert cache.end_for(1, 20) == (None, 1)   # older than all the history
    assert EpochCache().end_for(3, 1) == (None, None)


def test_kip101_case1_a_follower_behind_on_hw_keeps_its_records():
    leader = Log([1, 1, 1, 1, 2])              # promoted in epoch 2 after seq 4
    follower = Log([1, 1, 1, 1])               # had seq 4, its HW said 3
    assert reconcile(follower, leader) == 5
    assert follower.records == leader.records


def test_kip101_case2_a_returning_leader_drops_its_unreplicated_tail():
    old_leader = Log([1, 1, 1])                # seq 3 never reached the follower
    new_leader = Log([1, 1, 2, 2])             # wrote another seq 3 in epoch 2
    assert reconcile(old_leader, new_leader) == 3
    assert old_leader.records == new_leader.records


def test_kip279_double_failover_while_a_replica_was_away():
    away = Log([5] * 10)                       # D: epoch 5 up to seq 10
    leader = Log([5] * 8 + [6] * 3 + [7] * 4)  # C: kept 5 up to 8, then 6, then 7
    assert reconcile(away, leader) == 9
    assert away.records == leader.records


def test_an_epoch_the_leader_never_had_is_dropped_over_rounds():
    follower = Log([1, 1, 1, 1, 3, 3, 3])      # led epoch 3 alone, never replicated
    leader = Log([1, 1, 1, 1, 2, 2, 4, 4, 4])
    assert reconcile(follower, leader) == 5
    assert follower.records == leader.records


def test_random_histories_converge_without_keeping_a_divergent_record():
    """Random branching histories: a common prefix, then each side's own later epochs (the
    leader's always above the follower's, as the controller only raises epochs)."""
    for seed in range(500):
        _random_history(random.Random(seed))


def _random_history(rnd: random.Random) -> None:
    prefix = sorted(rnd.choice([1, 2, 3]) for _ in range(rnd.randrange(0, 6)))
    top = prefix[-1] if prefix else 0
    mine = sorted(rnd.randrange(top, top + 3) or 1 for _ in range(rnd.randrange(0, 5)))
    base = max(mine + prefix + [0])
    theirs = sorted(rnd.randrange(base + 1, base + 4) for _ in range(rnd.randrange(0, 5)))
    follower, leader = Log(prefix + mine), Log(prefix + theirs)
    kept = reconcile(follower, leader)
    assert follower.records == leader.records
    assert kept == len(prefix) + 1             # the whole shared prefix kept, nothing more


def test_a_leader_answer_above_the_question_is_a_bug():
    with pytest.raises(InvariantViolation):
        EpochCache([(1, 1)]).divergence(EpochEnd(5, 3), 2, 4)
