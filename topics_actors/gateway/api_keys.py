"""API keys (spec/api.md 2): parsing TOPICS_API_KEYS, and who may do what.

Entries are comma-separated: `key`, `key:scopes`, `key:scopes:prefixes` or `key::prefixes`.
Only the SHA-256 digest of each secret is kept; a presented key is hashed and compared with
every digest in constant time (hmac.compare_digest, no early exit). Secrets never reach a
log line or an error message.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.key_scopes import (  # noqa: F401  (KeySyntaxError, forbidden: re-exported)
    KeySyntaxError, forbidden, name_allowed, parse_prefixes, parse_scopes,
)


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    digest: bytes
    scopes: frozenset[str]
    prefixes: tuple[bytes, ...]      # empty: any name
    label: str                       # "key-<n>" for logs, never the secret

    def allows_name(self, name: str) -> bool:
        return name_allowed(self.prefixes, name)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def parse_api_keys(text: str | None) -> "KeyRing":
    keys = []
    for number, entry in enumerate((text or "").split(","), 1):
        entry = entry.strip()
        if not entry:
            continue
        secret, _, rest = entry.partition(":")
        if not secret:
            raise KeySyntaxError(f"TOPICS_API_KEYS entry {number}: empty key")
        scope_field, _, prefix_field = rest.partition(":")
        scopes = parse_scopes(scope_field, f"TOPICS_API_KEYS entry {number}")
        keys.append(ApiKey(_digest(secret), scopes, parse_prefixes(prefix_field),
                           f"key-{len(keys) + 1}"))
    return KeyRing(tuple(keys))


def unauthorized() -> TopicsError:
    return TopicsError("a valid API key is required (Authorization: Bearer <key>)",
                       ErrorCode.UNAUTHORIZED)


@dataclasses.dataclass(frozen=True, slots=True)
class KeyRing:
    keys: tuple[ApiKey, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def lookup(self, authorization: str | None) -> ApiKey | None:
        """The key presented as `Bearer <key>`, or None. Hashes first, then compares the
        digest with every key (no early exit), so timing says nothing about the keys."""
        if not authorization:
            return None
        scheme, _, secret = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return None
        presented = _digest(secret.strip())
        found = None
        for key in self.keys:
            if hmac.compare_digest(presented, key.digest) and found is None:
                found = key
        return found

    def authenticate(self, authorization: str | None) -> ApiKey | None:
        """None in dev mode (no keys); else the key, or 401."""
        if not self.keys:
            return None
        key = self.lookup(authorization)
        if key is None:
            raise unauthorized()
        return key


def check_scope(key: ApiKey | None, scope: str | tuple[str, ...]) -> None:
    """403 unless `key` holds `scope` (every one of them, for a tuple); None: no keys."""
    if key is None:
        return
    for needed in (scope,) if isinstance(scope, str) else scope:
        if needed not in key.scopes:
            raise forbidden(f"this key lacks the {needed} scope")


def check_name(key: ApiKey | None, name: str) -> None:
    if key is not None and not key.allows_name(name):
        raise forbidden("this key may not use this topic name", name)
