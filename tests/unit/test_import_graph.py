"""The map as a test: the engine's modules form no import cycle; every import follows the
layer order docs/ARCHITECTURE.md section 2 states, and every module is in a layer; each
package's `__init__` docstring names every module of the package; the compactor does not
reach into the shard package (both read the log through topics_actors.ledger)."""

from __future__ import annotations

import ast
import pathlib
import re

from tools.import_graph import cycles, import_graph, layer_violations, parse_layers

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


def test_every_import_follows_the_layers_the_map_states():
    layers = parse_layers((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert len(layers) >= 10 and ["protocol/"] in layers
    graph = import_graph(ROOT / "topics_actors")
    assert layer_violations(graph, "topics_actors", layers) == []


def test_an_import_against_the_layers_and_a_module_in_none_are_found():
    graph = {"pkg.low": {"pkg.core.part"}, "pkg.core.part": {"pkg.base"},
             "pkg.base": set(), "pkg.stray": set()}
    layers = [["base"], ["core/"], ["low"]]
    assert layer_violations(graph, "pkg", layers) == ["pkg.stray: in no layer"]
    assert layer_violations(graph, "pkg", [["base"], ["low"], ["core/"], ["stray"]]) == [
        "pkg.low -> pkg.core.part"]
    text = ("<!-- layers -->\n```\nbase, core/part  the words\n  more words\nlow  x\n```\n"
            "<!-- /layers -->\n")
    assert parse_layers(text) == [["base", "core/part"], ["low"]]


def test_each_package_names_every_module_in_its_docstring():
    missing = []
    inits = [*(ROOT / "topics_actors").rglob("__init__.py"), ROOT / "supervisor" / "__init__.py"]
    for init in sorted(inits):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for module in sorted(init.parent.glob("*.py")):
            if module.name in ("__init__.py", "__main__.py"):
                continue
            if not re.search(rf"\b{re.escape(module.stem)}\b", doc):
                missing.append(str(module.relative_to(ROOT)))
    assert missing == []
