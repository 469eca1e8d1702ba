"""TOPICS_MAX_TOTAL_BYTES across shards: a write that would lift the node's live bytes over
the quota is refused with 429 (changing nothing) and admitted again once space is freed."""

from __future__ import annotations

import pytest

from topics_actors.client import TopicsError
from tools.testing.node_harness import names_on

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

RECORD = {"data": "x" * 100}     # 102 bytes of compact JSON


def test_quota_spans_shards_and_frees_up_after_deletes(make_node):
    node = make_node(shards=2, env={"TOPICS_MAX_TOTAL_BYTES": "1000"})
    c = node.client()
    (a,), (b,) = names_on(0, 1, "qa"), names_on(1, 1, "qb")
    c.append(a, [RECORD] * 4)      # 408 bytes on shard 0
    c.append(b, [RECORD] * 4)      # 816 in all, on two shards
    with pytest.raises(TopicsError) as caught:
        c.append(a, [RECORD] * 2)  # 1020 > 1000
    error = caught.value
    assert error.status == 429 and error.code.wire == "throttled"
    assert error.detail["limit"] == "max_total_bytes" and error.detail["max"] == 1000
    assert c.get_topic(a)["head_seq"] == 4          # the refused write changed nothing
    with pytest.raises(TopicsError):
        c.append("qnew", [RECORD] * 2, create=True)  # a new topic counts the same
    c.delete_records(b, before_seq=5)               # frees shard 1's 408 bytes
    assert c.append(a, [RECORD] * 2)["seqs"] == [5, 6]
