"""Progress of a long job over a total known up front, reported at most ~10 times a second."""

from __future__ import annotations

import time
from collections.abc import Callable

PROGRESS_INTERVAL_S = 0.1

Progress = Callable[[int, int], None]     # (done, total)


class ProgressMeter:
    """Monotone, throttled progress over a total fixed up front."""

    def __init__(self, total: int, callback: Progress | None):
        self.total, self.callback = total, callback
        self.done, self.shown, self.next_at = 0, -1, 0.0

    def set(self, done: int) -> None:
        self.done = max(self.done, min(self.total, done))
        if self.callback is not None and time.monotonic() >= self.next_at:
            self._show()

    def _show(self) -> None:
        self.next_at = time.monotonic() + PROGRESS_INTERVAL_S
        self.shown = self.done
        self.callback(self.done, self.total)

    def finish(self) -> None:
        self.done = self.total
        if self.callback is not None and self.shown != self.total:
            self._show()
