"""The C library's calls that Python's standard library does not wrap: prctl, mallopt and
malloc_trim.

The handle is the process's own symbols (libc's among them), not a library found by name:
ctypes.util.find_library runs `ldconfig -p` in a subprocess and searches its output with a
regular expression, which in a forked child costs a few ms of its start and, as measured,
about 1.2 MB of pages copied from the fork server (docs/OPERATIONS.md 17). Elsewhere than
glibc, LIBC is None and every call here reports that it did nothing.
"""

from __future__ import annotations

import ctypes


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return libc if all(hasattr(libc, name) for name in ("prctl", "mallopt",
                                                          "malloc_trim")) else None


LIBC = _libc()

PR_SET_PDEATHSIG = 1           # prctl options (linux/prctl.h)
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> bool:
    """prctl(option, value); whether it applied."""
    return LIBC is not None and LIBC.prctl(option, value, 0, 0, 0) == 0
