import os

import pytest

from tools.testing.node_harness import Node, alive


@pytest.fixture
def make_node(tmp_path):
    """Start nodes on tmp data dirs; every one is stopped (and its group killed) at teardown."""
    nodes = []

    def make(shards: int = 2, data_dir: str | None = None, env: dict | None = None,
             start: bool = True, client_options: dict | None = None) -> Node:
        node = Node(data_dir or str(tmp_path / f"data{len(nodes)}"), shards, env,
                    log_path=str(tmp_path / f"node{len(nodes)}.log"),
                    client_options=client_options)
        nodes.append(node)
        return node.start() if start else node
    yield make
    pids = []
    for node in nodes:
        if node.proc is not None:
            pids += [child.pid for child in node.children()]
            node.stop()
    assert not alive(pids), "a node left processes behind"


@pytest.fixture
def data_dir(tmp_path):
    path = tmp_path / "data"
    os.makedirs(path, exist_ok=True)
    return str(path)
