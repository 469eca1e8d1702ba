"""The gateway's settings from TOPICS_* environment variables (spec/api.md 2, 11).

Read once at start by every gateway process and, to fail loud before anything is spawned,
by the supervisor. A value that does not parse raises SystemExit with the variable's name
(never its value when it may hold a secret).
"""

from __future__ import annotations

import dataclasses
import os

from topics_actors.gateway.api_keys import KeyRing, KeySyntaxError, parse_api_keys

BODY_BYTES_MAX_DEFAULT = 67_108_864


def _flag(env, name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true")


def _cap(env, name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise SystemExit(f"{name} must not be negative (0 = unlimited)")
    return value


# field -> the variable that sets it (0 = unlimited, except the heartbeat floor)
_CAPS = {"body_bytes_max": "TOPICS_MAX_BODY_BYTES", "topics_max": "TOPICS_MAX_TOPICS",
         "routers_max": "TOPICS_MAX_ROUTERS",
         "inflight_per_key_max": "TOPICS_MAX_INFLIGHT_PER_KEY",
         "watch_sessions_max": "TOPICS_MAX_WATCH_SESSIONS",
         "sse_connections_max": "TOPICS_MAX_SSE_CONNECTIONS",
         "sse_connections_per_key_max": "TOPICS_MAX_SSE_CONNECTIONS_PER_KEY",
         "test_min_heartbeat_ms": "TOPICS_TEST_MIN_HEARTBEAT_MS"}


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    keys: KeyRing = dataclasses.field(default_factory=KeyRing)
    probe_auth: bool = False
    allow_insecure_no_auth: bool = False
    body_bytes_max: int = BODY_BYTES_MAX_DEFAULT      # 0 = unlimited
    topics_max: int = 100_000                         # 0 = unlimited
    routers_max: int = 10_000                         # 0 = unlimited
    inflight_per_key_max: int = 1_000                 # 0 = unlimited
    watch_sessions_max: int = 10_000                  # 0 = unlimited
    sse_connections_max: int = 10_000                 # 0 = unlimited
    sse_connections_per_key_max: int = 1_000          # 0 = unlimited; auth on only
    test_min_heartbeat_ms: int = 0                    # 0 = the 1000 ms floor

    @classmethod
    def from_env(cls, env=None) -> "GatewaySettings":
        """Each cap from its variable (_CAPS), its default the field's own."""
        env = os.environ if env is None else env
        try:
            keys = parse_api_keys(env.get("TOPICS_API_KEYS"))
        except KeySyntaxError as error:
            raise SystemExit(str(error)) from None
        return cls(keys=keys, probe_auth=_flag(env, "TOPICS_PROBE_AUTH"),
                   allow_insecure_no_auth=_flag(env, "TOPICS_ALLOW_INSECURE_NO_AUTH"),
                   **{field: _cap(env, variable, getattr(cls, field))
                      for field, variable in _CAPS.items()})

    def check_bind(self, host: str, loopback: bool) -> None:
        """Refuse a non-loopback bind without keys unless explicitly allowed."""
        if not loopback and not self.keys.enabled and not self.allow_insecure_no_auth:
            raise SystemExit(
                f"refusing to listen on non-loopback host {host!r} without API keys; set "
                "TOPICS_API_KEYS, or TOPICS_ALLOW_INSECURE_NO_AUTH=1 to accept the risk")
