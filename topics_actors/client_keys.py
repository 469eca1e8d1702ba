"""ZeroMQ client keys: the CURVE public keys allowed on the node's client-facing TCP
sockets (the front and each shard's TCP socket), and what each may do.

TOPICS_ZMQ_CLIENT_KEYS is a comma list like TOPICS_API_KEYS, with a client's Z85 public key
(40 characters) where the API key's secret would be: `<public>`, `<public>:scopes`,
`<public>:scopes:prefixes` or `<public>::prefixes` (key_scopes). A key not listed fails the
CURVE handshake (curve_auth); a listed key's requests are checked kind by kind here, with
the scopes of the matching HTTP routes (docs/OPERATIONS.md 13).
"""

from __future__ import annotations

import dataclasses
import os

from zmq.utils import z85

from topics_actors.errors import ErrorCode, TopicsError
from topics_actors.key_scopes import (
    KeySyntaxError, forbidden, name_allowed, parse_prefixes, parse_scopes,
)

ENV = "TOPICS_ZMQ_CLIENT_KEYS"
PUBLIC_KEY_CHARS = 40          # Z85 of a 32-byte Curve25519 key

# The scopes each request kind needs, as the HTTP routes that do the same (docs/HTTP.md 3:
# a claim needs read and write, the other queue operations write). Kinds of the node's own
# processes (checkpoint, watch sessions...) need admin over TCP.
KIND_SCOPES = {
    "status": (), "get_topic": ("read",), "list_topics": ("read",), "diff": ("read",),
    "scan": ("read",), "append": ("write",), "ack": ("write",), "nack": ("write",),
    "extend": ("write",), "held": ("write",), "claim": ("read", "write"),
    "delete_topic": ("delete",), "delete_records": ("delete",), "put_topic": ("admin",),
    "put_router": ("admin",), "list_routers": ("read",), "delete_routers": ("delete",),
    "router_sync": ("read",), "repair_topic": ("admin",), "checksum": ("read",),
    "reassign": ("admin",),
    "replica_fetch": ("admin",), "epoch_query": ("admin",),   # between nodes' shards
}
# The fields of a request that name a topic or a router: each must be within the prefixes.
_NAMED_FIELDS = ("topic", "router", "source")
INTERNAL_SCOPES = ("admin",)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientKey:
    public: str                      # Z85; not a secret, but logs use the label
    scopes: frozenset[str]
    prefixes: tuple[bytes, ...]      # empty: any name
    label: str                       # "client-key-<n>"


@dataclasses.dataclass(frozen=True, slots=True)
class ClientKeyRing:
    keys: dict = dataclasses.field(default_factory=dict)     # public (Z85) -> ClientKey

    @property
    def enabled(self) -> bool:
        return bool(self.keys)

    def allows(self, public: str) -> bool:
        return public in self.keys

    def authorize(self, public: str | None, msg) -> None:
        """Raise `unauthorized` for a peer with no listed key, `forbidden` for a request
        its key may not make; return when it may."""
        key = self.keys.get(public) if public else None
        if key is None:
            raise TopicsError("this connection has no allowed client key",
                              ErrorCode.UNAUTHORIZED)
        for scope in KIND_SCOPES.get(msg.KIND, INTERNAL_SCOPES):
            if scope not in key.scopes:
                raise forbidden(f"this key lacks the {scope} scope")
        if msg.KIND == "append" and msg.config is not None and "admin" not in key.scopes:
            raise forbidden("an append carrying config needs the admin scope", msg.topic)
        for field in _NAMED_FIELDS:
            name = getattr(msg, field, None)
            if name is not None and not name_allowed(key.prefixes, name):
                raise forbidden(f"this key may not use this {field} name", name)
        if msg.KIND == "list_routers" and key.prefixes:
            raise forbidden("this key is limited to prefixes: it may not list every router")
        if msg.KIND == "list_topics" and key.prefixes and not any(
                msg.prefix.encode("utf-8", "surrogatepass").startswith(p)
                for p in key.prefixes):
            raise forbidden("this key may list only under its prefixes: set `prefix`")


def client_keys_from_env(env=None) -> ClientKeyRing:
    """The node's allowlist; a list that does not parse stops the start (one line)."""
    env = os.environ if env is None else env
    try:
        return parse_client_keys(env.get(ENV))
    except KeySyntaxError as error:
        raise SystemExit(str(error)) from None


def valid_public_key(text: str) -> bool:
    if len(text) != PUBLIC_KEY_CHARS:
        return False
    try:
        return len(z85.decode(text)) == 32
    except (ValueError, KeyError):
        return False


def parse_client_keys(text: str | None) -> ClientKeyRing:
    keys = {}
    for number, entry in enumerate((text or "").split(","), 1):
        entry = entry.strip()
        if not entry:
            continue
        # Z85 has `:` in its alphabet: the key is the first 40 characters, not a field
        public, rest = entry[:PUBLIC_KEY_CHARS], entry[PUBLIC_KEY_CHARS:]
        if not valid_public_key(public) or rest[:1] not in ("", ":"):
            raise KeySyntaxError(f"{ENV} entry {number}: not a Z85 CURVE public key "
                                 f"({PUBLIC_KEY_CHARS} characters)")
        scope_field, _, prefix_field = rest[1:].partition(":")
        keys[public] = ClientKey(public, parse_scopes(scope_field, f"{ENV} entry {number}"),
                                 parse_prefixes(prefix_field), f"client-key-{len(keys) + 1}")
    return ClientKeyRing(keys)
