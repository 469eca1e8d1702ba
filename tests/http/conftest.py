"""One node per test module (started with `topics serve` on ephemeral ports, its own data
dir and process group); a module sets NODE_ENV / NODE_SHARDS to configure it."""

import pytest

from tools.testing.node_harness import Node, alive


@pytest.fixture(scope="module")
def node(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("http")
    env = getattr(request.module, "NODE_ENV", {})
    shards = getattr(request.module, "NODE_SHARDS", 2)
    started = Node(str(base / "data"), shards, env, log_path=str(base / "node.log")).start()
    yield started
    pids = [child.pid for child in started.children()]
    started.stop()
    assert not alive(pids), "the node left processes behind"
