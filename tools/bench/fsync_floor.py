"""The raw fdatasync floor of a directory: 4 KiB pwrite + fdatasync on a pre-zeroed file."""

from __future__ import annotations

import os
import tempfile
import time

from bench_stats import latency_summary

BLOCK = 4096
ZERO_CHUNK = 1024 * 1024


def _pre_zero(fd: int, size: int) -> None:
    zeros = bytes(ZERO_CHUNK)
    written = 0
    while written < size:
        written += os.pwrite(fd, zeros[:min(ZERO_CHUNK, size - written)], written)
    os.fsync(fd)


def fdatasync_floor(directory: str, iterations: int = 2000, max_seconds: float = 4.0) -> dict:
    """Time `iterations` (or until `max_seconds`) of pwrite(4 KiB) + fdatasync, overwriting
    a file that was zero-filled and fsynced first (the cheapest case on ext4)."""
    fd, path = tempfile.mkstemp(prefix="fsync-floor-", dir=directory)
    try:
        _pre_zero(fd, iterations * BLOCK)
        block = b"\xa5" * BLOCK
        samples = []
        began = time.monotonic()
        deadline = began + max_seconds
        for i in range(iterations):
            t0 = time.monotonic()
            os.pwrite(fd, block, i * BLOCK)
            os.fdatasync(fd)
            t1 = time.monotonic()
            samples.append(t1 - t0)
            if t1 >= deadline:
                break
        elapsed = time.monotonic() - began
    finally:
        os.close(fd)
        os.unlink(path)
    summary = latency_summary(samples)
    summary["ops_per_s"] = len(samples) / elapsed if elapsed > 0 else float("nan")
    return summary
