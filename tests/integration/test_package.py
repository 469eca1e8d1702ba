"""What `pip install` puts on a machine: the engine as `topics_actors` and the supervisor as
`topics_supervisor` (the repository's supervisor/ folder), never a top-level `supervisor`
package, which is supervisord's import name; and the installed code runs without the
repository on the path."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_wheel_installs_no_supervisor_package_and_runs_on_its_own(tmp_path):
    # Built from a copy without the checkout's build/: pip builds in the tree, and a module
    # moved since an earlier build would otherwise still ship from build/lib.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", ".git", "*.egg-info", "__pycache__", ".pytest_cache"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                            str(tmp_path / "dist"), str(source)], capture_output=True,
                           text=True, timeout=280)
    assert build.returncode == 0, build.stderr
    wheel = next((tmp_path / "dist").glob("topics_actors-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {"topics_actors", "topics_supervisor"} <= tops and "supervisor" not in tops
    names = zipfile.ZipFile(wheel).namelist()
    assert "topics_supervisor/systemd/topics.service" in names
    assert {"topics_actors/gateway/console/index.html",
            "topics_actors/gateway/console/console.js"} <= set(names)   # the console's files
    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                              "--target", str(target), str(wheel)], capture_output=True,
                             text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    every_module = (
        "import importlib, pkgutil, topics_actors, topics_supervisor.cli\n"
        "assert topics_supervisor.cli.__file__.startswith(%r)\n"
        "for m in pkgutil.walk_packages(topics_actors.__path__, 'topics_actors.'):\n"
        "    if '.spark' not in m.name:\n"
        "        importlib.import_module(m.name)\n" % str(target))
    env = dict(os.environ, PYTHONPATH=str(target))
    ran = subprocess.run([sys.executable, "-c", every_module], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    version = subprocess.run([sys.executable, str(target / "bin" / "topics"), "--version"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("topics "), version.stderr
