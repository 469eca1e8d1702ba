"""The quick gate's style limits (spec/style.md 2) hold for the whole tree."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_tidy_limits_hold():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "tidy.py")], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout
