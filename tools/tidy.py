"""House-style limits (spec/style.md 2): functions <= 70 lines, files <= 600 lines,
lines <= 100 columns. Usage: python tools/tidy.py [paths...]; exit 1 on any violation."""

from __future__ import annotations

import ast
import pathlib
import sys

FUNCTION_LINES_MAX = 70
FILE_LINES_MAX = 600
LINE_COLUMNS_MAX = 100
DEFAULT_ROOTS = ("topics_actors", "supervisor", "tools", "tests")


def check_file(path: pathlib.Path) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    problems = []
    if len(lines) > FILE_LINES_MAX:
        problems.append(f"{path}: {len(lines)} lines (max {FILE_LINES_MAX})")
    for number, line in enumerate(lines, 1):
        if len(line) > LINE_COLUMNS_MAX:
            problems.append(f"{path}:{number}: {len(line)} columns (max {LINE_COLUMNS_MAX})")
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES_MAX:
                problems.append(f"{path}:{node.lineno}: function {node.name} has {length} "
                                f"lines (max {FUNCTION_LINES_MAX})")
    return problems


def main(argv: list[str]) -> int:
    roots = [pathlib.Path(p) for p in (argv or DEFAULT_ROOTS)]
    files = sorted(f for root in roots
                   for f in ([root] if root.is_file() else root.rglob("*.py")))
    problems = [p for f in files for p in check_file(f)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
