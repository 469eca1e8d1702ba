"""kill -9 of the reclaimer in the middle of its segment work (issue 4, item 6): between the
two unlinks of a segment drop, after a cold copy, and just before the hot copy goes. The
node is then restarted without failpoints: every record still reads byte-identical (from
whichever tier holds it), the evicted range still tombstones, the next passes finish the
work, and fsck finds no problem and no orphan in either tier."""

from __future__ import annotations

import os

import pytest

from tools.testing.node_harness import wait_for
from topics_actors import fsck

pytestmark = pytest.mark.slow

FAST = {"TOPICS_CHECKPOINT_INTERVAL_MS": "300", "TOPICS_SEGMENT_MAX_EVENTS": "8",
        "TOPICS_RECLAIM_INTERVAL_MS": "200", "TOPICS_HOT_RETAIN_SEGMENTS": "1"}
KEPT = 80


def cold_segments(cold_dir: str) -> int:
    root = os.path.join(cold_dir, "topics")
    return sum(name.endswith(".data") for _, _, files in os.walk(root) for name in files)


def write(c) -> list:
    c.put_topic("capped", durable=True, cap_records=10)
    c.put_topic("kept", durable=True)
    for start in range(0, KEPT, 8):
        c.append("capped", [{"data": i} for i in range(start, start + 8)])
        c.append("kept", [{"data": {"n": i, "pad": "x" * 40}, "tag": f"t{i % 3}"}
                          for i in range(start, start + 8)])
    return c.diff("kept", 0, limit=1000, include_tags=True)["records"]


def check(c, kept: list) -> None:
    assert c.diff("kept", 0, limit=1000, include_tags=True)["records"] == kept
    capped = c.diff("capped", 0, limit=1000)
    assert capped["tombstone"]["reason"] == "cap" and capped["tombstone"]["gap_to"] == KEPT - 10
    assert [r["$seq"] for r in capped["records"]] == list(range(KEPT - 9, KEPT + 1))


def clean(data_dir: str, cold_dir: str) -> bool:
    report = fsck.check(data_dir, cold_dir=cold_dir)
    assert report.errors == 0, report.problems
    return report.orphan_segments == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("site", ["reclaim::between_unlinks", "cold::after_copy",
                                  "cold::before_hot_delete"])
def test_reclaimer_killed_mid_segment_work_loses_nothing(make_node, tmp_path, site):
    data_dir, cold_dir = str(tmp_path / "data"), str(tmp_path / "cold")
    env = dict(FAST, TOPICS_COLD_DIR=cold_dir)
    node = make_node(shards=2, data_dir=data_dir, env=dict(env, TOPICS_FAILPOINTS=f"{site}=kill"))
    c = node.client()
    kept = write(c)
    wait_for(lambda: "child=reclaimer-00 state=down exit_code=-9" in node.log(), 40,
             f"the reclaimer to die at {site}")
    check(c, kept)                          # the live node serves everything meanwhile
    node.stop()

    node = make_node(shards=2, data_dir=data_dir, env=env)
    c = node.client()
    check(c, kept)
    wait_for(lambda: cold_segments(cold_dir) >= KEPT // 8 - 2, 40, "relocations to finish")
    wait_for(lambda: clean(data_dir, cold_dir), 40, "the sweep to leave no orphan")
    check(c, kept)
    node.stop()
    node = make_node(shards=2, data_dir=data_dir, env=env)   # reads after a cold restart
    check(node.client(), kept)
