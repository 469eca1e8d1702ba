"""Replicated deletes by tag, and the copies that must not keep what they deleted: a
follower applies the leader's op through its own tag index (ledger/tag_index.py,
ledger/delete_rules.py), which must cover the op's match (built again when it does not)
and hold the records fetched after it was built; a copy that missed a committed delete
while out of the ISR rejoins it (and so may be elected) only once it holds the delete
(cluster/isr_tracker.py); a new leader alone in the ISR applies the delete it held from its
predecessor at once, not after a fetch that never comes (it answers 503 predecessor_ops
until it has). Method: a leader and a follower shard of two nodes in one process
(tools/testing/replica_pair.py)."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.protocol.messages import DeleteRecords, Diff
from topics_actors.storage.frame_body import MATCH_EQ

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"


@pytest.fixture
def pair(tmp_path):
    pair = ReplicaPair(pair_env(tmp_path, "a"), pair_env(tmp_path, "b"), TOPIC,
                       {"durability": "fsync"})
    yield pair
    pair.close()


def _write(pair: ReplicaPair, tags: list[str]) -> None:
    pair.leader.append(TOPIC, *[[b'{"n":%d}' % n, tag] for n, tag in enumerate(tags)],
                       acks="leader")


def _delete(pair: ReplicaPair, match) -> None:
    """A replicated delete by tag, committed and applied on both copies."""
    pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match=match), 0)
    pair.leader.core.commit()
    for _ in range(4):
        pair.committed_round()
    assert not pair.follower.core.registry.get(TOPIC).ops.pending


def _live(harness) -> dict[int, str]:
    topic = harness.core.registry.get(TOPIC)
    return {seq: rec.tag for seq in range(topic.earliest_seq(), topic.head + 1)
            if (rec := harness.core.reader.read(topic, seq)) is not None}


def test_a_follower_builds_its_index_again_for_a_tag_it_does_not_cover(pair):
    _write(pair, ["keep", "pii", "ok", "pii", "ok", "pii"])
    for _ in range(3):
        pair.committed_round()
    _delete(pair, "keep")                          # the follower's index: `keep` only
    index = pair.follower.core.registry.get(TOPIC).tags
    assert index is not None and index.matches() == [(MATCH_EQ, "keep")]
    _delete(pair, "pii")                           # not covered: built again
    assert pair.follower.core.registry.get(TOPIC).tags.covers(MATCH_EQ, "pii")
    assert _live(pair.follower) == _live(pair.leader) == {3: "ok", 5: "ok"}


def test_records_a_follower_fetched_after_building_its_index_are_in_it(pair):
    _write(pair, ["pii", "ok", "pii"])
    for _ in range(3):
        pair.committed_round()
    _delete(pair, "pii")                           # the follower's index covers `pii`
    _write(pair, ["pii", "ok", "pii", "ok"])       # seqs 4..7, fetched after the build
    for _ in range(3):
        pair.committed_round()
    _delete(pair, "pii")
    assert _live(pair.follower) == _live(pair.leader) == {2: "ok", 5: "ok", 7: "ok"}


def test_a_copy_that_missed_a_committed_delete_rejoins_the_isr_only_once_it_holds_it(pair):
    """A follower out of the ISR (the controller dropped it) misses a delete the leader
    commits alone and answers. Caught up on records, it is proposed back only once its
    fetches report the delete's op held: proposed before (as it was), then elected when
    the leader dies before its next fetch, it served the deleted records."""
    _write(pair, ["pii", "ok", "pii", "ok"])
    for _ in range(3):
        pair.committed_round()
    pair.roles(isr=("a",))                         # b left the ISR (its session was lost)
    leader = pair.leader.core.replicas.leader
    pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match="pii"), 0)
    pair.leader.core.commit()                      # the op, durable: committed over {a}
    pair.leader.core.commit()                      # applied
    assert _live(pair.leader) == {2: "ok", 4: "ok"}
    pair.committed_round()                         # b: every record, not yet the op
    assert pair.follower.core.registry.get(TOPIC).ops.leo == 2
    assert leader.isr_proposals() == []
    pair.committed_round()                         # b reports the op held
    assert [isr for *_, isr in leader.isr_proposals()] == [["a", "b"]]


def test_a_new_leader_alone_in_the_isr_applies_its_predecessors_delete_and_serves(pair):
    pair.leader.append(TOPIC, *[[b'{"n":%d}' % n, "pii" if n % 2 else "ok"]
                                for n in range(6)], acks="leader")
    pair.rounds(3)
    pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match="pii"), 0)
    pair.leader.core.commit()
    pair.round()                   # b holds the op, not yet that it is committed
    pending = pair.follower.core.registry.get(TOPIC).ops.pending
    assert [op.epoch for op in pending] == [1]
    new = pair.roles_message(leader="b", epoch=2, isr=("b",))
    pair.follower.turn(new)        # a died: b leads alone (and applies, with no reply)
    assert not pair.follower.core.registry.get(TOPIC).ops.pending
    reply = pair.follower.call(Diff(TOPIC, 0, limit=100, include_tags=True))
    assert [r[3] for r in reply["records"]] == ["ok", "ok", "ok"]


def test_a_follower_batch_that_fails_leaves_its_committed_delete_to_apply_again(pair):
    """The fetch answer that commits a delete fails to reach the follower's WAL (a full
    disk): the op log goes back with the batch, so the delete is still pending and applies
    with the next answer. Counted applied without its Delete frame, its records stayed."""
    _write(pair, ["pii", "ok", "pii", "ok"])
    for _ in range(3):
        pair.committed_round()
    pair.leader.core.submit(b"p", 1, DeleteRecords(TOPIC, match="pii"), 0)
    pair.leader.core.commit()
    ops = pair.follower.core.registry.get(TOPIC).ops
    pair.committed_round()                          # b holds the op, not yet applied
    assert (ops.applied, [op.no for op in ops.pending]) == (0, [1])
    failed = 0
    while ops.applied == 0 and failed == 0:         # the answer that applies it fails
        pair.follower.fs.fail("write_at", kind="enospc")
        try:
            pair.committed_round()
        except TopicsError as error:
            failed += 1
            assert error.code == ErrorCode.INSUFFICIENT_STORAGE
        pair.follower.fs.clear()
    assert failed == 1 and (ops.applied, [op.no for op in ops.pending]) == (0, [1])
    for _ in range(3):
        pair.committed_round()
    assert ops.applied == 1 and not ops.pending
    assert _live(pair.follower) == _live(pair.leader) == {2: "ok", 4: "ok"}
