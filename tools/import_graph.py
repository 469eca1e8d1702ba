"""The import graph of a package, and its cycles (the reshape rule: none in topics_actors/).

Every `import` and `from ... import` anywhere in a module counts, including those under
`if TYPE_CHECKING:` and inside functions: a cycle hidden behind a lazy import is still two
modules that cannot be understood apart. `from pkg import name` names the submodule
`pkg.name` when there is one, else the package itself.
Usage: python tools/import_graph.py [package-dir]; exit 1 if a cycle exists.
"""

from __future__ import annotations

import ast
import pathlib
import sys


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _targets(node: ast.AST, here: str, is_package: bool, modules: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = here.split(".")
        anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join(anchor + ([base] if base else []))
    named = [f"{base}.{alias.name}" for alias in node.names]
    return [name if name in modules else base for name in named]


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports."""
    paths = {module_name(root, p): p for p in sorted(root.rglob("*.py"))}
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        found = set()
        for node in ast.walk(tree):
            found.update(t for t in _targets(node, name, is_package, modules)
                         if t in modules and t != name)
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[0] if argv else "topics_actors").resolve()
    found = cycles(import_graph(root))
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    sys.exit(main(sys.argv[1:]))
