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

SCOPES = ("read", "write", "delete", "admin")
_SCOPE_TOKENS = {"read": ("read",), "r": ("read",), "write": ("write",), "w": ("write",),
                 "delete": ("delete",), "del": ("delete",), "d": ("delete",),
                 "admin": ("admin",), "a": ("admin",), "rw": ("read", "write")}


class KeySyntaxError(ValueError):
    """TOPICS_API_KEYS does not parse; the node refuses to start."""


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    digest: bytes
    scopes: frozenset[str]
    prefixes: tuple[bytes, ...]      # empty: any name
    label: str                       # "key-<n>" for logs, never the secret

    def allows_name(self, name: str) -> bool:
        if not self.prefixes:
            return True
        raw = name.encode("utf-8", "surrogatepass")
        return any(raw.startswith(prefix) for prefix in self.prefixes)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _scopes(field: str, number: int) -> frozenset[str]:
    if not field:
        return frozenset(SCOPES)
    scopes: set[str] = set()
    for token in field.split("+"):
        granted = _SCOPE_TOKENS.get(token.strip().lower())
        if granted is None:
            raise KeySyntaxError(f"TOPICS_API_KEYS entry {number}: unknown scope {token!r} "
                                 f"(use read|r, write|w, delete|del|d, admin|a, rw)")
        scopes.update(granted)
    return frozenset(scopes)


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
        prefixes = tuple(p.encode() for p in prefix_field.split("|") if p)
        keys.append(ApiKey(_digest(secret), _scopes(scope_field, number), prefixes,
                           f"key-{len(keys) + 1}"))
    return KeyRing(tuple(keys))


def unauthorized() -> TopicsError:
    return TopicsError("a valid API key is required (Authorization: Bearer <key>)",
                       ErrorCode.UNAUTHORIZED)


def forbidden(message: str, topic: str | None = None) -> TopicsError:
    return TopicsError(message, ErrorCode.FORBIDDEN, {"topic": topic} if topic else None)


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


def check_scope(key: ApiKey | None, scope: str) -> None:
    if key is not None and scope not in key.scopes:
        raise forbidden(f"this key lacks the {scope} scope")


def check_name(key: ApiKey | None, name: str) -> None:
    if key is not None and not key.allows_name(name):
        raise forbidden("this key may not use this topic name", name)
