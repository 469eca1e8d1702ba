"""What a key may do: its scopes and its topic-name prefixes (spec/api.md 2), one model for
the HTTP API keys (gateway/api_keys.py) and the ZeroMQ client keys (client_keys.py).

An entry's text after the key is `scopes:prefixes`: scopes `+`-separated (read|r,
write|w, delete|del|d, admin|a, rw), empty meaning all four; prefixes `|`-separated byte
prefixes of topic names, empty meaning any name.
"""

from __future__ import annotations

from topics_actors.errors import ErrorCode, TopicsError

SCOPES = ("read", "write", "delete", "admin")
_SCOPE_TOKENS = {"read": ("read",), "r": ("read",), "write": ("write",), "w": ("write",),
                 "delete": ("delete",), "del": ("delete",), "d": ("delete",),
                 "admin": ("admin",), "a": ("admin",), "rw": ("read", "write")}


class KeySyntaxError(ValueError):
    """A key list does not parse; the node refuses to start."""


def parse_scopes(field: str, where: str) -> frozenset[str]:
    """The scopes of an entry's scope field; `where` names the entry in the error."""
    if not field:
        return frozenset(SCOPES)
    scopes: set[str] = set()
    for token in field.split("+"):
        granted = _SCOPE_TOKENS.get(token.strip().lower())
        if granted is None:
            raise KeySyntaxError(f"{where}: unknown scope {token!r} "
                                 f"(use read|r, write|w, delete|del|d, admin|a, rw)")
        scopes.update(granted)
    return frozenset(scopes)


def parse_prefixes(field: str) -> tuple[bytes, ...]:
    return tuple(p.encode() for p in field.split("|") if p)


def name_allowed(prefixes: tuple[bytes, ...], name: str) -> bool:
    if not prefixes:
        return True
    raw = name.encode("utf-8", "surrogatepass")
    return any(raw.startswith(prefix) for prefix in prefixes)


def forbidden(message: str, topic: str | None = None) -> TopicsError:
    return TopicsError(message, ErrorCode.FORBIDDEN, {"topic": topic} if topic else None)
