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


_NOTABLE = (b"WARNING", b"ERROR", b"CRITICAL", b"event=leader_changed", b"event=controller",
            b"event=zookeeper_session", b"event=topic_placed")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that started nodes shows their notable log lines: a CI failure of a
    cluster test is otherwise a bare assertion, its nodes' tmp dirs gone."""
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if not report.failed or tmp_path is None:
        return
    for log in sorted(tmp_path.glob("node*.log")):
        lines = [line for line in log.read_bytes().splitlines()
                 if any(mark in line for mark in _NOTABLE)]
        text = b"\n".join(lines[-60:]).decode(errors="replace")
        report.sections.append((f"notable lines of {log.name}", text))
