"""The C library's calls (topics_actors/libc.py): prctl applies and says so, found without
a search for the library (which would run ldconfig in a subprocess)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

import pytest

from topics_actors import libc

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(libc.LIBC is None, reason="glibc only")]

PR_GET_PDEATHSIG = 2
PR_GET_CHILD_SUBREAPER = 37

PROBE = f"""
import ctypes, sys, subprocess
calls = []
subprocess.Popen.__init__ = lambda *a, **k: calls.append(a)   # no ldconfig, no subprocess
from topics_actors import libc
got = ctypes.c_int(0)
print(libc.prctl(libc.PR_SET_PDEATHSIG, {int(signal.SIGUSR1)}),
      libc.LIBC.prctl({PR_GET_PDEATHSIG}, ctypes.byref(got), 0, 0, 0) == 0 and got.value,
      libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1),
      libc.LIBC.prctl({PR_GET_CHILD_SUBREAPER}, ctypes.byref(got), 0, 0, 0) == 0 and got.value,
      libc.prctl(-1, 0), len(calls))
"""


def test_prctl_applies_and_reports_a_refusal():
    """Run in a fresh interpreter: both settings are process-wide."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", str(int(signal.SIGUSR1)), "True", "1", "False", "0"]


def test_the_handle_has_the_calls_the_policies_use():
    assert all(isinstance(getattr(libc.LIBC, name), ctypes._CFuncPtr)
               for name in ("prctl", "mallopt", "malloc_trim"))
