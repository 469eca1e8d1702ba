"""The import graph of a package, its cycles (the reshape rule: none in topics_actors/), and
the imports that run against a stated layer order (docs/ARCHITECTURE.md section 2).

Every `import` and `from ... import` anywhere in a module counts, including those under
`if TYPE_CHECKING:` and inside functions: a cycle hidden behind a lazy import is still two
modules that cannot be understood apart. `from pkg import name` names the submodule
`pkg.name` when there is one, else the package itself.
Usage: python tools/import_graph.py [package-dir] [--layers docs/ARCHITECTURE.md]; exit 1 if
a cycle exists, or an import runs against the layers.
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


LAYERS_BEGIN = "<!-- layers -->"
LAYERS_END = "<!-- /layers -->"


def parse_layers(text: str) -> list[list[str]]:
    """The layer order of docs/ARCHITECTURE.md: the lines between LAYERS_BEGIN and
    LAYERS_END (in its code block) that start at the margin, each a layer of names (a
    top-level module, `pkg/` a package, `pkg/module` one module of a package) separated by
    commas, ended by two spaces before its description; lines that start with a space
    carry on a description."""
    block = text.split(LAYERS_BEGIN, 1)[1].split(LAYERS_END, 1)[0]
    layers = []
    for line in block.splitlines():
        if not line or line[0] in " `":
            continue
        names = line.split("  ", 1)[0]
        layers.append([name.strip() for name in names.split(",") if name.strip()])
    return layers


def layer_of(module: str, package: str, layers: list[list[str]]) -> int | None:
    """The index of the layer naming `module` (its most specific name), None if none."""
    parts = module.split(".")[1:] or ["__init__"]
    candidates = ["/".join(parts)] + ["/".join(parts[:i]) + "/" for i in
                                      range(len(parts), 0, -1)]
    for candidate in candidates:
        for index, layer in enumerate(layers):
            if candidate in layer:
                return index
    return None


def layer_violations(graph: dict[str, set[str]], package: str,
                     layers: list[list[str]]) -> list[str]:
    """Every import into a later layer ("a -> b"), and every module in no layer."""
    out = []
    for module in sorted(graph):
        here = layer_of(module, package, layers)
        if here is None:
            out.append(f"{module}: in no layer")
            continue
        for target in sorted(graph[module]):
            there = layer_of(target, package, layers)
            if there is not None and there > here:
                out.append(f"{module} -> {target}")
    return out


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    root = pathlib.Path(args[0] if args else "topics_actors").resolve()
    graph = import_graph(root)
    found = cycles(graph)
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    against = []
    if "--layers" in argv:
        doc = pathlib.Path(args[1] if len(args) > 1 else "docs/ARCHITECTURE.md")
        against = layer_violations(graph, root.name, parse_layers(doc.read_text()))
        for line in against:
            print("against the layers: " + line)
    return 1 if found or against else 0


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    sys.exit(main(sys.argv[1:]))
