"""One router (spec/api.md 6) as its destination's shard keeps it: the definition, the
durable cursor into the source, and how RouterCreate / RouterDelete / RouterCursor frames
change it.

A router lives with its destination topic (`TopicState.routers`, by name): the frames carry
the destination's topic id, so the destination's shard replays them, the compactor keeps
them in the topic's snapshot entry, and deleting the destination drops its routers with it.
The cursor is the last source seq the router has dealt with (forwarded, filtered out, or
passed over because it was gone); every forwarded batch logs a RouterCursor frame in the
same WAL batch as the copies it appends, so a restart resumes exactly where the log says.
"""

from __future__ import annotations

import dataclasses

from topics_actors.errors import invalid
from topics_actors.ledger.delete_rules import Match, matches, parse_match
from topics_actors.storage import frame_body
from topics_actors.storage.frame_body import MATCH_EQ, RouterCreateBody, RouterCursorBody

HOPS_MAX = 8                 # a copy is made only of records that passed fewer routers
GUARANTEES = ("at_least_once", "exactly_once")

_PRESERVE_NODE, _PRESERVE_TAG, _CREATE_DEST, _ALLOW_CYCLE, _EXACTLY_ONCE = (
    1, 2, 4, 8, 16)


@dataclasses.dataclass(slots=True)
class RouterState:
    name: str
    source: str
    dest: str
    preserve_node: bool = True
    preserve_tag: bool = True
    create_dest: bool = True
    allow_cycle: bool = False
    exactly_once: bool = False
    filter: Match | None = None
    cursor: int = 0
    forwarded_total: int = 0

    # --- the definition ------------------------------------------------------------------

    @property
    def guarantee(self) -> str:
        return GUARANTEES[self.exactly_once]

    def same_knobs(self, other: "RouterState") -> bool:
        return self.create_body(0) == other.create_body(0)

    def create_body(self, cursor: int) -> RouterCreateBody:
        bits = ((_PRESERVE_NODE if self.preserve_node else 0)
                | (_PRESERVE_TAG if self.preserve_tag else 0)
                | (_CREATE_DEST if self.create_dest else 0)
                | (_ALLOW_CYCLE if self.allow_cycle else 0)
                | (_EXACTLY_ONCE if self.exactly_once else 0))
        return RouterCreateBody(self.name, self.source, self.dest, bits, self.filter, cursor,
                                self.forwarded_total)

    @classmethod
    def from_body(cls, body: RouterCreateBody) -> "RouterState":
        bits = body.bits
        return cls(body.name, body.source, body.dest, bool(bits & _PRESERVE_NODE),
                   bool(bits & _PRESERVE_TAG), bool(bits & _CREATE_DEST),
                   bool(bits & _ALLOW_CYCLE), bool(bits & _EXACTLY_ONCE), body.match,
                   body.initial_cursor, body.initial_dest_base)

    def passes(self, tag: str | None, hops: int) -> bool:
        """Whether a live source record is copied (untagged never matches a filter)."""
        return hops < HOPS_MAX and (self.filter is None or matches(self.filter, tag))

    def filter_json(self) -> list[str] | None:
        if self.filter is None:
            return None
        op, value = self.filter
        return ["tag", "Eq", value] if op == MATCH_EQ else ["tag", "Glob", value + "*"]

    def describe(self) -> dict:
        """The router as GET /v0/routers/:r shows it (plus the cursor, for operators)."""
        return {"router": self.name, "source": self.source, "dest": self.dest,
                "preserve_node": self.preserve_node, "preserve_tag": self.preserve_tag,
                "filter": self.filter_json(), "allow_cycle": self.allow_cycle,
                "guarantee": self.guarantee, "forwarded_total": self.forwarded_total,
                "cursor": self.cursor}

    # --- frames and snapshots -------------------------------------------------------------

    def cursor_body(self, cursor: int, total: int, trim: tuple[int, int] = (0, 0)) -> bytes:
        return frame_body.encode_router_cursor(RouterCursorBody(self.name, cursor, total,
                                                                *trim))

    def to_entry(self) -> list:
        body = self.create_body(self.cursor)
        return [body.name, body.source, body.dest, body.bits,
                list(body.match) if body.match else None, self.cursor, self.forwarded_total]

    @classmethod
    def from_entry(cls, entry: list) -> "RouterState":
        name, source, dest, bits, match, cursor, total = entry
        return cls.from_body(RouterCreateBody(name, source, dest, bits,
                                              tuple(match) if match else None, cursor, total))


def parse_definition(name: str, body: dict) -> RouterState:
    """A PUT body (spec/api.md 6.1) as a router; 400 on a missing or mistyped field."""
    for field in ("source", "dest"):
        if not isinstance(body.get(field), str):
            raise invalid(f"field {field!r} is required and must be a string")
    flags = {}
    for field, default in (("preserve_node", True), ("preserve_tag", True),
                           ("create_dest", True), ("allow_cycle", False)):
        value = body.get(field, default)
        if value is None:
            value = default
        if not isinstance(value, bool):
            raise invalid(f"field {field!r} must be a boolean")
        flags[field] = value
    guarantee = body.get("guarantee") or "at_least_once"
    if guarantee not in GUARANTEES:
        raise invalid("field 'guarantee' must be 'at_least_once' or 'exactly_once'")
    return RouterState(name, body["source"], body["dest"], exactly_once=(
        guarantee == "exactly_once"), filter=parse_match(body.get("filter")), **flags)


def apply_create(routers: dict, body: RouterCreateBody) -> None:
    """A logged create or re-PUT: a new router starts at the logged cursor; an existing one
    keeps its progress and takes the new knobs."""
    fresh = RouterState.from_body(body)
    old = routers.get(body.name)
    if old is not None:
        fresh.cursor, fresh.forwarded_total = old.cursor, old.forwarded_total
    routers[body.name] = fresh


def apply_cursor(routers: dict, body: RouterCursorBody) -> bool:
    """A logged forwarding step; False when the router is unknown (deleted meanwhile)."""
    router = routers.get(body.name)
    if router is None:
        return False
    router.cursor = max(router.cursor, body.cursor)
    router.forwarded_total = max(router.forwarded_total, body.forwarded_total)
    return True
