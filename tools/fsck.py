"""Verify a data dir from a checkout: python tools/fsck.py <data-dir> [--dump] [--json]
[--no-progress]. The same as `topics fsck` (supervisor/cli.py), without installing."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from supervisor.cli import main  # noqa: E402  (needs the checkout on sys.path)

if __name__ == "__main__":
    sys.exit(main(["fsck", *sys.argv[1:]]))
