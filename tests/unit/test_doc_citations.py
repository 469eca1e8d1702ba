"""The docs stand on their own: every repository path a doc in docs/ (or the README) cites
in backticks exists in this repository, and none points outside it.

Method: each backtick span is cut into slash-separated tokens; a token whose first
component is a top-level folder of a repository (`spec/`, `topics_actors/`, `tools/`,
`docs/`, `tests/`, `supervisor/`, `examples/`) must exist, relative to the repository
root; a token starting with `../` fails. Relative module paths (`shard/...`) and on-disk
layout names (`wal/shard-NN/`) are not repository paths and are not checked.
"""

from __future__ import annotations

import os
import re

import pytest

pytestmark = pytest.mark.timeout(10)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOTS = ("spec", "topics_actors", "tools", "docs", "tests", "supervisor", "examples")
SPAN = re.compile(r"`([^`\n]+)`")
TOKEN = re.compile(r"[\w.\-]*(?:/[\w.\-]*)+")


def docs() -> list[str]:
    folder = os.path.join(REPO, "docs")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".md"))
    return [os.path.join(folder, n) for n in names] + [os.path.join(REPO, "README.md")]


def missing_citations(text: str) -> list[tuple[int, str]]:
    """(line, path) of every cited repository path that does not exist."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for span in SPAN.findall(line):
            for token in TOKEN.findall(span):
                path = token.rstrip(".,:;")
                outside = path.startswith("../")
                if outside or (path.split("/")[0] in ROOTS
                               and not os.path.exists(os.path.join(REPO, path))):
                    found.append((number, path))
    return found


def test_the_checker_catches_missing_and_outside_paths():
    text = ("see `spec/api.md` 5 and `../shared/x.md`; `topics_actors/gateway/` and "
            "`python tools/tidy.py` exist, `wal/shard-NN/` is a data layout\n"
            "`topics_actors/nope.py`")
    assert missing_citations(text) == [(1, "spec/api.md"), (1, "../shared/x.md"),
                                       (2, "topics_actors/nope.py")]


@pytest.mark.parametrize("path", docs(), ids=os.path.basename)
def test_every_cited_path_exists(path):
    with open(path, encoding="utf-8") as f:
        assert missing_citations(f.read()) == []
