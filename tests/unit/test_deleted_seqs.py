"""A topic's seqs deleted one by one, as runs (ledger/deleted_seqs.py), against a plain set.

| id | what |
|---|---|
| DS-1 | random adds, floors, cuts and their undo answer as a set of ints does |
| DS-2 | a queue's acks in order become one run, whatever their number |
| DS-3 | next_absent jumps over a run; first is the lowest seq |
"""

from __future__ import annotations

import random

import pytest

from topics_actors.ledger.deleted_seqs import RECENT_MAX, DeletedSeqs

pytestmark = pytest.mark.timeout(60)


def _same(seqs: DeletedSeqs, reference: set[int], probe: range) -> None:
    assert [s for s in probe if s in seqs] == sorted(s for s in reference if s in probe)
    assert sorted(seqs) == sorted(reference) and len(seqs) == len(reference)
    assert seqs.first() == (min(reference) if reference else None)
    assert bool(seqs) == bool(reference)


@pytest.mark.parametrize("seed", range(6))
def test_it_answers_as_a_set(seed):   # DS-1
    rng = random.Random(seed)
    seqs, reference, floor = DeletedSeqs(), set(), 0
    for step in range(4000):
        roll = rng.random()
        if roll < 0.85:
            seq = floor + 1 + (rng.randrange(3000) if rng.random() < 0.3 else step % 2000)
            seqs.add(seq)
            reference.add(seq)
        elif roll < 0.92:
            floor += rng.randrange(200)
            seqs.drop_through(floor)
            reference = {s for s in reference if s > floor}
        elif roll < 0.96:
            last = floor + rng.randrange(2500)
            taken = seqs.take_above(last)
            assert sorted(taken) == sorted(s for s in reference if s > last)
            assert all(s <= last for s in seqs)
            seqs.put_back(taken)
        if step % 500 == 0:
            _same(seqs, reference, range(floor, floor + 3100))
    _same(seqs, reference, range(floor, floor + 3100))


def test_acks_in_order_make_one_run():   # DS-2
    seqs = DeletedSeqs()
    for seq in range(1, 20 * RECENT_MAX):
        seqs.add(seq)
    assert seqs.runs() == [(1, 20 * RECENT_MAX - 1)]
    seqs.add(5)                            # again: nothing changes
    seqs.add(20 * RECENT_MAX + 5)
    assert seqs.runs() == [(1, 20 * RECENT_MAX - 1), (20 * RECENT_MAX + 5,) * 2]


def test_next_absent_and_first():   # DS-3
    seqs = DeletedSeqs([3, 4, 5, 9])
    assert [seqs.next_absent(s) for s in (1, 3, 4, 5, 6, 9, 10)] == [1, 6, 6, 6, 6, 10, 10]
    assert seqs.first() == 3
    seqs.drop_through(4)
    assert seqs.runs() == [(5, 5), (9, 9)]
    assert DeletedSeqs([7]) == DeletedSeqs([7]) and DeletedSeqs([7]) != DeletedSeqs([8])
