"""The supervisor gives up on a child that cannot start: a shard killed in every replay
(an environment-armed failpoint) is restarted with backoff until it failed to start more than
TOPICS_RESTART_MAX times within TOPICS_RESTART_WINDOW_MS; then the node logs
`event=restart_gave_up`, stops its other children in order and exits 3. A child that dies
after it was ready (the kill tests) is never given up on: tests/unit/test_restart_policy.py."""

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_a_shard_that_cannot_start_stops_the_node(make_node, data_dir):
    node = make_node(shards=1, data_dir=data_dir)
    node.client().append("replayed", [{"data": 1}])
    node.stop()
    node = make_node(shards=1, data_dir=data_dir, start=False,
                     env={"TOPICS_FAILPOINTS": "recovery::mid_replay=kill",
                          "TOPICS_RESTART_MAX": "2", "TOPICS_RESTART_WINDOW_MS": "60000"})
    node.start(wait_ready=False)
    assert node.proc.wait(60) == 3
    log = node.log()
    assert log.count("child=shard-00 state=starting") == 3
    assert ("event=restart_gave_up child=shard-00 exit_code=-9 failed_starts=3 "
            "window_ms=60000 action=stopping_node") in log
    assert "child=compactor-00 state=down exit_code=0" in log      # an orderly stop
    assert "supervisor INFO event=stopped" in log
