"""The engine's modules form no import cycle, and the compactor does not reach into the
shard package (both read the log through topics_actors.ledger)."""

from __future__ import annotations

import pathlib

from tools.import_graph import cycles, import_graph

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def test_no_import_cycle_in_the_engine_or_the_supervisor():
    for package in ("topics_actors", "supervisor"):
        assert cycles(import_graph(ROOT / package)) == [], package


def test_the_compactor_does_not_import_the_shard():
    graph = import_graph(ROOT / "topics_actors")
    compactor = [m for m in graph if m.startswith("topics_actors.compactor")]
    reached = _reachable(graph, compactor)
    assert compactor and not [m for m in reached if m.startswith("topics_actors.shard")]
    assert "topics_actors.ledger.topic_ledger" in reached


def test_a_cycle_is_found_also_behind_type_checking_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("from . import c\n")
    (pkg / "c.py").write_text("def f():\n    import pkg.a\n")
    (pkg / "d.py").write_text("from pkg import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b", "pkg.c"]]
