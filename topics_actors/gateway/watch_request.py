"""The rules of a watch session that need no sockets (spec/api.md 7.1, 7.2): the POST body,
the wid, the identity a session is bound to, and the stream GET's Accept and key.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets

from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.api_keys import ApiKey, KeyRing
from topics_actors.limits import NODE_BYTES_MAX, clamp

WATCH_TOPICS_MAX = 256
HEARTBEAT_MS_DEFAULT = 15_000
HEARTBEAT_MS_MIN = 1_000
HEARTBEAT_MS_MAX = 60_000
WATCH_LIMIT_DEFAULT = 256
WATCH_LIMIT_MAX = 1_000
WATCH_BATCH_BYTES_DEFAULT = 262_144
SESSION_TTL_MS = 300_000
WID_PREFIX = "wid_"
_CONSISTENCY = ("eventual", "strong")


@dataclasses.dataclass(frozen=True)
class WatchPlan:
    topics: dict            # name -> (from_seq, tail), in name order
    options: dict           # node, limit, max_batch_bytes, heartbeat_ms, include_*


def min_heartbeat_ms(test_floor_ms: int) -> int:
    """The heartbeat floor: 1000 ms, or TOPICS_TEST_MIN_HEARTBEAT_MS (1..1000) in tests."""
    return clamp(test_floor_ms, 1, HEARTBEAT_MS_MIN) if test_floor_ms else HEARTBEAT_MS_MIN


def topic_entry(name: str, value) -> tuple[int, bool]:
    if not isinstance(value, dict):
        raise invalid("each watched topic maps to {\"from_seq\", \"tail\"}", {"topic": name})
    return rb.field_uint(value, "from_seq"), bool(rb.field_bool(value, "tail", False))


def read_options(body: dict, limit_default: int, batch_bytes_default: int) -> dict:
    """The read options of a watch or a WebSocket subscribe: node, limit (0 means the
    default, at most 1000), max_batch_bytes and the include_* switches."""
    limit = min(rb.field_uint(body, "limit") or limit_default, WATCH_LIMIT_MAX)
    node = rb.field_nodes(body)
    if any(len(n.encode()) > NODE_BYTES_MAX for n in ([node] if isinstance(node, str)
                                                       else node or ())):
        raise invalid(f"a node name has at most {NODE_BYTES_MAX} bytes")
    return {
        "node": node, "limit": limit,
        "max_batch_bytes": rb.field_uint(body, "max_batch_bytes", batch_bytes_default),
        "include_meta": rb.field_bool(body, "include_meta", True),
        "include_tags": rb.field_bool(body, "include_tags", False),
        "include_data": rb.field_bool(body, "include_data", True),
    }


def parse_watch(body: dict, heartbeat_floor_ms: int) -> WatchPlan:
    topics = body.get("topics")
    if not isinstance(topics, dict):
        raise invalid("field 'topics' (a map of topic name to options) is required")
    if not 1 <= len(topics) <= WATCH_TOPICS_MAX:
        raise invalid(f"a watch names 1 to {WATCH_TOPICS_MAX} topics, not {len(topics)}")
    entries = {name: topic_entry(name, topics[name]) for name in sorted(topics)}
    consistency = body.get("consistency", "eventual")
    if consistency is not None and consistency not in _CONSISTENCY:
        raise invalid("field 'consistency' must be \"eventual\" or \"strong\"")
    heartbeat = rb.field_uint(body, "heartbeat_ms", HEARTBEAT_MS_DEFAULT)
    options = read_options(body, WATCH_LIMIT_DEFAULT, WATCH_BATCH_BYTES_DEFAULT)
    options["heartbeat_ms"] = clamp(heartbeat, heartbeat_floor_ms, HEARTBEAT_MS_MAX)
    return WatchPlan(entries, options)


def new_wid() -> str:
    """`wid_` + unpadded base64url of 16 random bytes (26 characters, unguessable)."""
    return WID_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


def owner_of(key: ApiKey | None) -> str:
    """The identity a session is bound to: a hash of the key's digest ("" without auth)."""
    if key is None:
        return ""
    return hashlib.sha256(b"watch-owner:" + key.digest).hexdigest()[:32]


def accepts_event_stream(accept: str | None) -> bool:
    if not accept:
        return True
    lowered = accept.lower()
    return "text/event-stream" in lowered or "*/*" in lowered


def not_acceptable() -> TopicsError:
    return TopicsError("this stream answers only Accept: text/event-stream",
                       ErrorCode.NOT_ACCEPTABLE)


def presented_key(keys: KeyRing, authorization: str | None, token: str | None) -> ApiKey | None:
    """The valid key a stream GET presents (`Authorization: Bearer`, else `?token=`), or
    None (none presented, an unknown one, or auth off)."""
    if not keys.enabled:
        return None
    if authorization:
        return keys.lookup(authorization)
    return keys.lookup(f"Bearer {token}") if token else None
