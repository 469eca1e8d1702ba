"""A follower's fetch state machine (cluster/follower_fetch.py) against a modelled leader
and a lossy, duplicating, reordering link: it truncates where the logs part, then copies
the leader's log exactly; an answer for an old epoch, a duplicate or one out of order is
never applied; it asks for more only once what it applied is committed."""

import random

from topics_actors.cluster.epoch_cache import EpochCache
from topics_actors.cluster.follower_fetch import (
    Apply, EpochQuery, FetchAnswer, FetchRequest, FollowerFetch, Truncate,
)

from tests.unit.test_epoch_cache import Log


def leader_answer(leader: Log, request, leader_epoch: int, hw_seq: int, max_records: int):
    if isinstance(request, EpochQuery):
        asked = request.asked_epoch
        return ("epoch", leader_epoch, leader.cache.end_for(asked, leader.leo))
    first = request.fetch_leo
    seqs = list(range(first, min(leader.leo, first + max_records)))
    epochs = [(e, s) for e, s in leader.cache.entries() if first <= s < first + len(seqs)]
    return ("fetch", FetchAnswer(leader_epoch, first, [(s, leader.records[s]) for s in seqs],
                                 epochs, hw_seq))


def apply_to(follower: Log, action) -> None:
    if isinstance(action, Truncate):
        follower.truncate(action.leo)
    elif isinstance(action, Apply):
        for seq, epoch in action.records:
            follower.records[seq] = epoch
        for epoch, start in action.epochs:
            follower.cache.assign(epoch, start)


def replicate(follower: Log, leader: Log, leader_epoch: int, rnd: random.Random) -> None:
    fetch = FollowerFetch("t", leader_epoch, EpochCache(follower.cache.entries()), follower.leo)
    in_flight = []                                   # answers on the wire, maybe repeated
    for _ in range(2000):
        request = fetch.next_request()
        if request is None:                          # the local commit of what was applied
            fetch.committed(follower.leo)
            continue
        if isinstance(request, FetchRequest) and request.fetch_leo == leader.leo:
            for kind, *rest in in_flight:            # late copies change nothing now
                before = dict(follower.records)
                apply_to(follower, _deliver(fetch, kind, rest))
                assert follower.records == before
            break
        answer = leader_answer(leader, request, leader_epoch, leader.leo - 1,
                               rnd.randint(1, 4))
        in_flight.append(answer)
        if rnd.random() < 0.3:
            in_flight.append(answer)                 # duplicated
        rnd.shuffle(in_flight)                       # reordered
        kind, *rest = in_flight.pop()
        if rnd.random() < 0.1:
            continue                                 # lost (the next request repeats it)
        apply_to(follower, _deliver(fetch, kind, rest))
        assert fetch.cache.entries() == follower.cache.entries()
    else:
        raise AssertionError("no convergence")


def _deliver(fetch: FollowerFetch, kind: str, rest: list):
    return fetch.on_epoch_end(*rest) if kind == "epoch" else fetch.on_fetch(rest[0])


def test_a_diverged_follower_converges_over_a_bad_link():
    for seed in range(300):
        rnd = random.Random(seed)
        common = sorted(rnd.choice([1, 2]) for _ in range(rnd.randrange(0, 6)))
        top = common[-1] if common else 1
        mine = [top + rnd.randrange(0, 2) for _ in range(rnd.randrange(0, 5))]
        theirs = sorted(rnd.randrange(max(mine + [top]) + 1, max(mine + [top]) + 4)
                        for _ in range(rnd.randrange(0, 8)))
        follower, leader = Log(common + sorted(mine)), Log(common + theirs)
        replicate(follower, leader, (leader.cache.latest or 0) + 1, rnd)
        assert follower.records == leader.records, seed


def test_stale_and_out_of_order_answers_are_dropped():
    fetch = FollowerFetch("t", 3, EpochCache(), 1)
    assert fetch.next_request() == FetchRequest("t", 3, 1)
    assert fetch.on_fetch(FetchAnswer(2, 1, [1], [(2, 1)], 1)) is None     # old epoch
    assert fetch.on_fetch(FetchAnswer(3, 2, [2], [], 2)) is None           # not at our leo
    applied = fetch.on_fetch(FetchAnswer(3, 1, ["r1", "r2"], [(3, 1)], 2))
    assert applied == Apply(1, ["r1", "r2"], [(3, 1)])
    assert fetch.next_request() is None                                    # not committed
    assert fetch.on_fetch(FetchAnswer(3, 1, ["r1", "r2"], [(3, 1)], 2)) is None  # duplicate
    fetch.committed(3)
    assert fetch.next_request() == FetchRequest("t", 3, 3) and fetch.hw_seq == 2


def test_a_new_leader_epoch_means_asking_again():
    fetch = FollowerFetch("t", 3, EpochCache([(3, 1)]), 5)
    assert fetch.next_request() == EpochQuery("t", 3, 3)
    fetch.on_epoch_end(3, fetch.cache.end_for(3, 5))
    assert isinstance(fetch.next_request(), FetchRequest)
    fetch.new_leader_epoch(4)
    assert fetch.next_request() == EpochQuery("t", 4, 3)
    assert fetch.on_epoch_end(3, fetch.cache.end_for(3, 5)) is None       # for epoch 3


def test_a_leader_behind_our_log_in_the_same_epoch_is_asked_again():
    """A leader that lost an unsynced tail and kept its epoch refuses our fetch as past its
    log end; the follower then asks where the logs part instead of fetching forever."""
    from topics_actors.cluster.epoch_cache import EpochCache, EpochEnd
    from topics_actors.cluster.follower_fetch import EpochQuery, FetchRequest, FollowerFetch
    fetch = FollowerFetch("t", 3, EpochCache([(3, 1)]), 11)
    fetch.on_epoch_end(3, EpochEnd(3, 11))
    assert isinstance(fetch.next_request(), FetchRequest)
    fetch.leader_behind()
    assert fetch.next_request() == EpochQuery("t", 3, 3)
    cut = fetch.on_epoch_end(3, EpochEnd(3, 8))
    assert cut is not None and cut.leo == 8
    assert fetch.next_request() == FetchRequest("t", 3, 8)
