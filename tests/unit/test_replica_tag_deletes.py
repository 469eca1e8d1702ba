"""Replicated deletes by tag on a follower whose tag index does not hold what the delete
names (ledger/tag_index.py, ledger/delete_rules.py): the follower applies the leader's op
through its own index, so that index must cover the op's match (built again when it does
not) and hold the records the follower fetched after building it. Method: a leader and a
follower shard of two nodes in one process (tools/testing/replica_pair.py)."""

import pytest

from tools.testing.replica_pair import ReplicaPair, pair_env
from topics_actors.protocol.messages import DeleteRecords
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
