"""How long a client keeps retrying one request, shared by both clients."""

from __future__ import annotations

import os
import time

from topics_actors.errors import ErrorCode, TopicsError

BACKOFF_MIN_S = 0.02
BACKOFF_MAX_S = 0.5
CONNECT_TIMEOUT_MS = 2_000     # how long a first contact waits for a connection
REQUEST_TIMEOUT_MS = 5_000     # how long one attempt waits for its reply
RETRY_DEADLINE_MS = 30_000    # how long a request is retried in all


def unavailable(what: str) -> TopicsError:
    """The error of a request that got no answer in time (retryable by the caller)."""
    return TopicsError(f"{what} did not answer in time", ErrorCode.NOT_READY,
                       {"retryable": True})


def no_node(endpoint: str, waited_ms: int) -> TopicsError:
    """The error of a client that never reached its node: nothing listens at `endpoint`,
    or nothing answered there. Raised at once, not retried: a wrong address does not heal
    by waiting, and a node that was reached once is retried through its restarts instead."""
    return TopicsError(f"no node at {endpoint}: nothing answered within {waited_ms} ms",
                       ErrorCode.NOT_READY, {"endpoint": endpoint})


def outcome_unknown(key: str | None, cause: TopicsError) -> TopicsError:
    """The error of an append some attempt of which may have been applied, unanswered (a
    silent leader, or one that lost its role with the write in flight), when its retries
    end: resending it without its key could store it twice."""
    return TopicsError(f"the append may or may not have been stored ({cause.message}); "
                       f"send it again only with idempotency_key {key!r}, which answers "
                       f"its original seqs if it was", ErrorCode.OUTCOME_UNKNOWN,
                       {"idempotency_key": key, "cause": cause.code.wire})


def new_session() -> str:
    """A client session: the prefix of the keys that make its append retries safe."""
    return "~" + os.urandom(8).hex()


class RetryBudget:
    def __init__(self, deadline_ms: int, what: str, started_s: float | None = None):
        """`started_s`: when the request began (monotonic), if before now: a client makes
        its budget only once a first attempt has failed."""
        self.deadline = (time.monotonic() if started_s is None else started_s) \
            + deadline_ms / 1000
        self.what = what
        self.backoff = BACKOFF_MIN_S
        self.last: TopicsError | None = None

    def absorb(self, error: TopicsError) -> bool:
        """Re-raise a final error; for a retryable one, whether the map should be refreshed.
        A configured limit (429 with detail `limit`, e.g. the node's byte quota) is final
        too: it frees up only when data goes, which retrying for seconds will not bring; so
        is not_enough_replicas (too few in-sync replicas, or nodes for a new topic): a
        replica rejoins the ISR, or a node the cluster, in seconds at best, so the caller
        hears of it at once and decides."""
        if (not error.retryable or (error.detail or {}).get("limit")
                or error.code is ErrorCode.NOT_ENOUGH_REPLICAS):
            raise error
        self.last = error
        return error.code == ErrorCode.NOT_READY

    def next_delay_s(self, cap_s: float | None = None) -> float:
        """The pause before the next attempt (at most `cap_s`, which does not grow the
        backoff); raises once the deadline would pass."""
        if cap_s is not None and cap_s < self.backoff:
            if time.monotonic() + cap_s > self.deadline:
                raise unavailable(f"{self.what} (retried until the deadline)")
            return cap_s
        delay = self.backoff
        if time.monotonic() + delay > self.deadline:
            raise unavailable(f"{self.what} (retried until the deadline)")
        self.backoff = min(BACKOFF_MAX_S, self.backoff * 2)
        return delay
