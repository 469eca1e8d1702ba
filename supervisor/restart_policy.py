"""When to restart a child that died: exponential backoff that resets after stable uptime."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class RestartPolicy:
    backoff_initial_ms: int = 100
    backoff_max_ms: int = 5_000
    stable_after_ms: int = 30_000      # uptime after which the backoff starts over
    consecutive_failures: int = 0

    def next_delay_ms(self, uptime_ms: float) -> int:
        """Delay before restarting a child that just exited after `uptime_ms`."""
        if uptime_ms >= self.stable_after_ms:
            self.consecutive_failures = 0
        delay = 0 if self.consecutive_failures == 0 else min(
            self.backoff_max_ms, self.backoff_initial_ms * 2 ** (self.consecutive_failures - 1))
        self.consecutive_failures += 1
        return delay
