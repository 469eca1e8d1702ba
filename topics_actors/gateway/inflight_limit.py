"""TOPICS_MAX_INFLIGHT_PER_KEY: concurrent requests per API key in one gateway process.

Counted only when auth is on (dev mode has no keys). Each gateway process counts its own
requests, so with N gateway workers a key may have up to N times the cap in flight.
"""

from __future__ import annotations

import contextlib

from topics_actors.errors import ErrorCode, TopicsError


class InflightLimit:
    def __init__(self, per_key_max: int):
        self.per_key_max = per_key_max          # 0 = unlimited
        self.counts: dict[str, int] = {}

    @contextlib.contextmanager
    def admit(self, label: str | None):
        if label is None or not self.per_key_max:
            yield
            return
        count = self.counts.get(label, 0)
        if count >= self.per_key_max:
            raise TopicsError("too many requests in flight for this key", ErrorCode.THROTTLED,
                              {"limit": "max_inflight_per_key", "max": self.per_key_max})
        self.counts[label] = count + 1
        try:
            yield
        finally:
            left = self.counts[label] - 1
            if left:
                self.counts[label] = left
            else:
                del self.counts[label]
