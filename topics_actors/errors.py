"""The exception tree of topics-actors.

    TopicsError                 an error with a closed ErrorCode (HTTP status + wire code)
     +-- ProtocolError          a malformed or unknown message (invalid_request)
     +-- StorageError           a persistence call failed (internal; insufficient_storage
     |                          when the disk is full)
     |    +-- CorruptionError   bytes on disk fail their checks where corruption is not a torn tail
     +-- DataDirLocked          another process holds the data dir
     +-- CannotListen           a node cannot bind one of its addresses
    InvariantViolation          a bug; never caught except by a process's top level

Wire codes and statuses are identical to the reference server's /v0 API, but for
insufficient_storage (507): the reference answers a full disk with internal (500).
"""

from __future__ import annotations

import enum
import errno
from typing import Any


class ErrorCode(enum.Enum):
    """Closed set of error codes: value = (HTTP status, wire code)."""

    INVALID_REQUEST = (400, "invalid_request")
    BATCH_TOO_LARGE = (400, "batch_too_large")
    RECORD_TOO_LARGE = (400, "record_too_large")
    UNAUTHORIZED = (401, "unauthorized")
    FORBIDDEN = (403, "forbidden")
    NOT_FOUND = (404, "not_found")
    TOPIC_NOT_FOUND = (404, "topic_not_found")
    ROUTER_NOT_FOUND = (404, "router_not_found")
    METHOD_NOT_ALLOWED = (405, "method_not_allowed")
    NOT_ACCEPTABLE = (406, "not_acceptable")
    ROUTER_CYCLE = (409, "router_cycle")
    TOPIC_EXISTS_INCOMPATIBLE = (409, "topic_exists_incompatible")
    TOPIC_NOT_EMPTY = (409, "topic_not_empty")
    NOT_A_QUEUE = (409, "not_a_queue")
    PAYLOAD_TOO_LARGE = (413, "payload_too_large")
    UNSUPPORTED_MEDIA_TYPE = (415, "unsupported_media_type")
    TOPIC_FULL = (422, "topic_full")
    THROTTLED = (429, "throttled")
    INTERNAL = (500, "internal")
    NOT_READY = (503, "not_ready")
    NOT_ENOUGH_REPLICAS = (503, "not_enough_replicas")
    SHUTTING_DOWN = (503, "shutting_down")
    NOT_LEADER = (503, "not_leader")      # a replicated topic led elsewhere: detail names it
    QUARANTINED = (503, "quarantined")    # recovery found a mismatch; repair it (admin)
    OUTCOME_UNKNOWN = (504, "outcome_unknown")  # a write sent, its fate unknown: retry with
                                                # its idempotency key, never without
    INSUFFICIENT_STORAGE = (507, "insufficient_storage")   # the data dir's disk is full

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def wire(self) -> str:
        return self.value[1]

    @property
    def retryable(self) -> bool:
        # A quarantined topic waits for an operator: retrying soon would only spin.
        return self.status in (429, 503) and self is not ErrorCode.QUARANTINED

    @classmethod
    def from_wire(cls, wire: str) -> "ErrorCode":
        return _BY_WIRE.get(wire, cls.INTERNAL)


_BY_WIRE = {code.wire: code for code in ErrorCode}


class TopicsError(Exception):
    """Base of every expected error; carries the API's error code."""

    default_code = ErrorCode.INTERNAL

    def __init__(self, message: str, code: ErrorCode | None = None,
                 detail: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        self.detail = detail

    @property
    def status(self) -> int:
        return self.code.status

    @property
    def retryable(self) -> bool:
        return self.code.retryable

    def to_wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code.wire, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return body

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> "TopicsError":
        code = ErrorCode.from_wire(str(body.get("code", "internal")))
        return cls(str(body.get("message", "")), code, body.get("detail"))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.wire}: {self.message})"


class ProtocolError(TopicsError):
    default_code = ErrorCode.INVALID_REQUEST


class StorageError(TopicsError):
    default_code = ErrorCode.INTERNAL


class CorruptionError(StorageError):
    pass


def storage_error(message: str, exc: BaseException) -> StorageError:
    """A StorageError for a failed write: `insufficient_storage` (507) when the disk is
    full (ENOSPC, EDQUOT: writes resume once space returns), else `internal`."""
    code = getattr(exc, "code", None)
    if not isinstance(code, ErrorCode):
        full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
        code = ErrorCode.INSUFFICIENT_STORAGE if full else ErrorCode.INTERNAL
    return StorageError(message, code)


class DataDirLocked(TopicsError):
    default_code = ErrorCode.INTERNAL


class CannotListen(TopicsError):
    """A node cannot bind one of its addresses (in use, not local, no permission)."""
    default_code = ErrorCode.INTERNAL


class InvariantViolation(AssertionError):
    """A broken internal invariant: a bug. Crash the process; never handle it."""


def invalid(message: str, detail: dict[str, Any] | None = None) -> TopicsError:
    return TopicsError(message, ErrorCode.INVALID_REQUEST, detail)


def quarantined(name: str, reason: str) -> TopicsError:
    return TopicsError(f"topic {name!r} is quarantined by recovery: {reason}",
                       ErrorCode.QUARANTINED, {"topic": name, "reason": reason})


def cap_reached(limit: str, maximum: int) -> TopicsError:
    """A node-wide cap (TOPICS_MAX_TOPICS, TOPICS_MAX_ROUTERS) is reached: 429 naming it."""
    return TopicsError(f"the node's {limit} cap ({maximum}) is reached", ErrorCode.THROTTLED,
                       {"limit": limit, "max": maximum})


def shutting_down() -> TopicsError:
    return TopicsError("the gateway is shutting down", ErrorCode.SHUTTING_DOWN)


def topic_not_found(name: str) -> TopicsError:
    return TopicsError(f"topic {name!r} not found", ErrorCode.TOPIC_NOT_FOUND, {"topic": name})


def router_not_found(name: str) -> TopicsError:
    return TopicsError(f"router {name!r} not found", ErrorCode.ROUTER_NOT_FOUND,
                       {"router": name})


def router_fan_in(dest: str) -> TopicsError:
    return TopicsError(f"another router already feeds {dest!r} from a different source",
                       ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                       {"topic": dest, "reason": "router_dest_fan_in"})


def router_repoint(name: str, source: str, dest: str) -> TopicsError:
    return TopicsError(f"router {name!r} exists with another source or destination",
                       ErrorCode.TOPIC_EXISTS_INCOMPATIBLE,
                       {"router": name, "reason": "router_repoint_forbidden",
                        "existing_source": source, "existing_dest": dest})


def router_cycle(cycle: list[str]) -> TopicsError:
    return TopicsError("the router would close a cycle: " + " -> ".join(cycle),
                       ErrorCode.ROUTER_CYCLE, {"cycle": cycle})
