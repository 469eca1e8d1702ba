"""The documentation site (mkdocs.yml over docs/) builds in strict mode: a link to a page
or an anchor that does not exist fails the build, and so this test."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_the_site_builds_strictly_with_every_page(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(site)], cwd=ROOT, capture_output=True, text=True, timeout=110,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    pages = [page for item in nav for page in item.values()]
    assert {p.name for p in (ROOT / "docs").glob("*.md")} == set(pages), "a page not in nav"
    for page in pages:
        html = site / ("index.html" if page == "index.md" else
                       pathlib.Path(page).stem + "/index.html")
        assert html.is_file(), page
