"""The routers whose destination is in this shard (spec/api.md 6), the core's part: define,
list and delete them, and apply what the shell's feed read from their sources.

Pull model, owned by the destination's shard. The shell (shard/routers/router_feed.py) keeps one
long-polling diff per router open against the source's shard (this one included) from the
router's cursor; its answer comes back here as a RouterPass. The copies and the advanced
cursor (a RouterCursor frame) are staged in one WAL batch, after the copies, so the log
holds both or the copies alone at a torn tail (then the next read forwards them again: at
least once), and a kill -9 (one write() per batch) neither skips nor repeats a record.

Definitions change at staging (later requests of the batch see them) with an undo entry in
`batch.undo_fns`, like queue leases. Nothing here blocks or touches a socket.
"""

from __future__ import annotations

import dataclasses

import orjson

from topics_actors.errors import InvariantViolation
from topics_actors.errors import (
    ErrorCode, TopicsError, invalid, router_fan_in, router_repoint, topic_not_found,
)
from topics_actors.ledger.delete_rules import parse_match
from topics_actors.ledger.router_state import RouterState
from topics_actors.ledger.topic_state import TopicState
from topics_actors.protocol.messages import DeleteRouters, ListRouters, PutRouter, RouterSync
from topics_actors.record_envelope import build, payload_bytes, split
from topics_actors.record_batch import StagedRecord
from topics_actors.shard.batch_stager import BatchStager, CommitInfo, Staged, read_op, write_op
from topics_actors.shard.long_poll import Park
from topics_actors.shard.record_append import RecordAppend
from topics_actors.shard.topic_admin import create_topic
from topics_actors.shard.topic_registry import TopicRegistry
from topics_actors.storage import frame_body
from topics_actors.storage.frame_types import FLAG_META, HOPS_SHIFT, FrameType
from topics_actors.topic_config import TopicConfig
from topics_actors.topic_identity import topic_id, valid_router_name, valid_topic_name

_FULL = (ErrorCode.TOPIC_FULL, ErrorCode.RECORD_TOO_LARGE)   # a smaller page may fit
SOURCE_EPOCH = 1     # a source's incarnation: deleting a topic deletes its routers


@dataclasses.dataclass(frozen=True, slots=True)
class RouterPass:
    """shell -> core (never on the wire): the answer of router `router`'s diff of its
    source from `from_seq` (the diff reply map, records with tags and hops)."""
    router: str
    from_seq: int
    reply: dict


Feed = tuple[str, str, int]     # (router, source, cursor): what the shell should read


class RouterBook:
    def __init__(self, stager: BatchStager, registry: TopicRegistry, appends: RecordAppend):
        self.stager = stager
        self.registry = registry
        self.appends = appends
        self.dest_of: dict[str, str] = {}    # router -> destination topic (may be stale)
        # router -> its cursor as readers see it, while a pass staged past it awaits its
        # commit (the cursor moves when a pass is staged, its copies show when committed)
        self.visible_cursor: dict[str, int] = {}
        self.indexed = False
        self.sources_owned = True     # a cluster node's shard holds copies (shard_core.py)

    # --- lookups ------------------------------------------------------------------------------

    def _index(self) -> dict[str, str]:
        """Router -> destination, built from the topics once after recovery."""
        if not self.indexed:
            self.indexed = True
            for topic in self.registry:
                for name in topic.routers or ():
                    self.dest_of[name] = topic.name
        return self.dest_of

    def find(self, name: str) -> tuple[TopicState, RouterState] | None:
        dest = self._index().get(name)
        topic = self.registry.get(dest) if dest is not None else None
        router = (topic.routers or {}).get(name) if topic is not None else None
        if router is None:
            self.dest_of.pop(name, None)     # its destination was deleted (or recreated)
            return None
        return topic, router

    def all(self) -> list[tuple[TopicState, RouterState]]:
        found = (self.find(name) for name in sorted(self._index()))
        return [item for item in found if item is not None]

    def feeds(self) -> list[Feed]:
        return [(r.name, r.source, r.cursor) for _, r in self.all()]

    def figures(self) -> dict:
        """`status` members: how many routers, and how many records they have copied."""
        found = self.all()
        return {"routers": len(found),
                "routers_forwarded": sum(r.forwarded_total for _, r in found)}

    # --- requests -----------------------------------------------------------------------------

    def put(self, msg: PutRouter) -> Staged:
        self.stager.throttle()
        wanted = _definition(msg)
        topic = self.registry.get(msg.topic)
        if topic is None and not msg.create_dest:
            raise topic_not_found(msg.topic)
        for other in (topic.routers or {}).values() if topic is not None else ():
            if other.source != msg.source and other.name != msg.router:
                raise router_fan_in(msg.topic)
        found = self.find(msg.router)
        if found is not None and (found[1].source, found[1].dest) != (msg.source, msg.topic):
            raise router_repoint(msg.router, found[1].source, found[1].dest)
        if topic is None:
            topic = create_topic(self.stager, self.registry, msg.topic, TopicConfig())
        old = found[1] if found is not None else None
        if old is not None:
            wanted.cursor, wanted.forwarded_total = old.cursor, old.forwarded_total
        if old is None or not old.same_knobs(wanted):
            self._set(topic, wanted, old)
            self.stager.frame(FrameType.ROUTER_CREATE, topic,
                              frame_body.encode_router_create(wanted.create_body(wanted.cursor)))
        reply = {**wanted.describe(), "created": old is None}
        return write_op(lambda info: reply)

    def list(self, msg: ListRouters) -> Staged:
        return read_op(lambda info: {"routers": [r.describe() for _, r in self.all()]})

    def settled(self, dest: str, cursors: list) -> bool:
        """Has every router named in `cursors` ([[router, cursor], ...]) dealt with its
        source up to its cursor? A router that is gone, or feeds another topic, has."""
        for name, cursor in cursors:
            found = self.find(name)
            if found is not None and found[0].name == dest \
                    and self.visible_cursor.get(name, found[1].cursor) < cursor:
                return False
        return True

    def cursors(self, dest: str, names: list) -> list[list]:
        """[[router, its cursor as readers see it now, its source's head now], ...] for the
        routers `names`. The cursor is None for one that is gone or feeds another topic
        (settled, as above); the head is None unless the source is in this shard and this
        shard has the last word on it (`sources_owned`: not a cluster node's copy)."""
        out = []
        for name in names:
            found = self.find(name)
            cursor = head = None
            if found is not None and found[0].name == dest:
                cursor = self.visible_cursor.get(name, found[1].cursor)
                source = self.registry.get(found[1].source) if self.sources_owned else None
                head = source.visible if source is not None else None
            out.append([name, cursor, head])
        return out

    def sync(self, msg: RouterSync) -> Staged:
        """Answer once the router has dealt with the source up to `msg.cursor`; parks on the
        destination, which every forwarding step wakes."""
        def now() -> dict:
            found = self.find(msg.router)
            if found is None or found[0].name != msg.topic:
                return {"router": msg.router, "cursor": 0, "caught_up": True}
            cursor = found[1].cursor
            return {"router": msg.router, "cursor": cursor, "caught_up": cursor >= msg.cursor}

        def answer(_info) -> dict | Park:
            state = now()
            if state["caught_up"] or msg.wait_ms <= 0:
                return state
            return Park(msg.topic, msg.wait_ms, now)
        return read_op(answer)

    def delete(self, msg: DeleteRouters) -> Staged:
        self.stager.throttle()
        gone = [(topic, router) for topic, router in self.all()
                if router.name == msg.router or router.source == msg.source]
        for topic, router in gone:
            self._set(topic, None, router)
            self.stager.frame(FrameType.ROUTER_DELETE, topic,
                              frame_body.encode_router_delete(router.name))
        names = sorted(router.name for _, router in gone)
        return write_op(lambda info: {"deleted": names})

    def _set(self, topic: TopicState, router: RouterState | None,
             old: RouterState | None) -> None:
        """Put `router` in place of `old` on `topic` (None: remove), undoably."""
        name = (router or old).name
        if router is None or old is None:
            self.visible_cursor.pop(name, None)    # a router made or gone: nothing pending
        if topic.routers is None:
            topic.routers = {}
        if router is None:
            topic.routers.pop(name, None)
        else:
            topic.routers[name] = router
            self.dest_of[name] = topic.name

        def undo() -> None:
            if old is None:
                topic.routers.pop(name, None)
            else:
                topic.routers[name] = old
                self.dest_of[name] = topic.name
        self.stager.batch.undo_fns.append(undo)

    # --- forwarding ---------------------------------------------------------------------------

    def _append_fitting(self, topic: TopicState, copies: list,
                       staged: bool) -> tuple[object, int]:
        """Stage the longest prefix of `copies` the destination admits, halving on a full
        `discard: reject` destination; (its publish or None, how many). With frames of
        this pass already `staged`, any refusal keeps them and copies nothing."""
        kept = len(copies)
        while kept:
            try:
                return self.appends.append_copies(topic, [c for _, c in copies[:kept]]), kept
            except TopicsError as error:
                if error.code not in _FULL and not staged:
                    raise
                kept = kept // 2 if error.code in _FULL else 0
        return None, 0

    def _pad_trim(self, topic: TopicState, tombstone: dict | None) -> tuple[int, int] | None:
        """Source records evicted before the router read them (a cap, TTL or source_trim
        tombstone of the page) become a run of dest seqs without records, so the dest's
        readers get a `source_trim` tombstone there; its HeadWatermark comes before the
        copies in the batch, as replay takes Appends only at head + 1."""
        if tombstone is None or tombstone["reason"] == "recreated":
            return None
        self.stager.save_undo(topic.name, topic)
        first = topic.next_seq
        last = first + tombstone["gap_to"] - tombstone["gap_from"]
        topic.next_seq = last + 1
        if topic.config.logged:
            topic.reserved_head = max(topic.reserved_head, last)
            self.stager.frame(FrameType.HEAD_WATERMARK, topic,
                              frame_body.encode_u64(topic.reserved_head), seq=last,
                              sync=topic.config.durability.acks_after_fsync)
        return first, last

    def forward(self, msg: RouterPass) -> Staged:
        """Stage the copies of a source page and the cursor past it. A stale page (the
        router moved on or is gone) is dropped; a refused one (destination full, quota,
        inbox) leaves the cursor where it is, and the feed reads the same page again."""
        found = self.find(msg.router)
        reply = msg.reply
        if found is None or found[1].cursor != msg.from_seq:
            return read_op(lambda info: {})
        topic, router = found
        end = reply["next_from_seq"]
        if end == router.cursor:
            return read_op(lambda info: {})
        copies = [(rec[0], _copy(router, rec)) for rec in reply["records"]
                  if router.passes(rec[3], rec[6])]
        if copies and copies[0][0] <= router.cursor:
            raise InvariantViolation(f"router {router.name!r} would copy seq {copies[0][0]} "
                                     f"again (its cursor is {router.cursor})")
        trim = self._pad_trim(topic, reply["tombstone"])
        publish, kept = self._append_fitting(topic, copies, trim is not None)
        if kept < len(copies):
            end = copies[kept][0] - 1     # the refused copy is the next page's first
            if end == router.cursor and trim is None:
                return read_op(lambda info: {})
        copies = copies[:kept]
        if end < router.cursor:
            raise InvariantViolation(f"router {router.name!r} would move its cursor back from "
                                     f"{router.cursor} to {end}")
        moved = dataclasses.replace(router, cursor=end,
                                    forwarded_total=router.forwarded_total + len(copies))
        self.stager.frame(FrameType.ROUTER_CURSOR, topic,
                          moved.cursor_body(end, moved.forwarded_total, trim or (0, 0)),
                          sync=topic.config.durability.acks_after_fsync)
        self._set(topic, moved, router)
        self.visible_cursor.setdefault(router.name, router.cursor)

        def done(info: CommitInfo) -> dict:
            self.visible_cursor.pop(router.name, None)
            if trim is not None:
                topic.pad_to(trim[1])      # before the copies: they follow the run
                topic.add_trim(*trim)
            if publish is not None:
                publish(info)
            info.woken.add(topic.name)     # a router_sync waits on the cursor, copies or not
            return {}
        return write_op(done)


def _definition(msg: PutRouter) -> RouterState:
    if not valid_router_name(msg.router):
        raise invalid(f"invalid router name {msg.router!r}", {"router": msg.router})
    for name in (msg.source, msg.topic):
        if not valid_topic_name(name):
            raise invalid(f"invalid topic name {name!r}", {"topic": name})
    if msg.source == msg.topic:
        raise invalid("a router's source and dest must differ")
    if msg.guarantee not in ("at_least_once", "exactly_once"):
        raise invalid("guarantee must be 'at_least_once' or 'exactly_once'")
    return RouterState(msg.router, msg.source, msg.topic, msg.preserve_node, msg.preserve_tag,
                       msg.create_dest, msg.allow_cycle, msg.guarantee == "exactly_once",
                       parse_match(msg.filter), cursor=msg.source_head)


def _copy(router: RouterState, rec: list) -> StagedRecord:
    """The destination's record for source record `rec` ([seq, ts, envelope, tag, node,
    has_meta, hops] of a diff reply): same data and meta, tag and node kept as asked, one
    hop more; exactly once adds where it came from to the meta."""
    seq, _ts, envelope, tag, node, with_meta, hops = rec
    flags = (FLAG_META if with_meta else 0) | ((hops + 1) << HOPS_SHIFT)
    if router.exactly_once:
        envelope = _with_origin(router, seq, envelope, with_meta)
        flags |= FLAG_META
    tag_bytes = tag.encode() if tag and router.preserve_tag else b""
    node_bytes = node.encode() if node and router.preserve_node else b""
    return envelope, tag_bytes, node_bytes, flags, payload_bytes(len(envelope), flags)


def _with_origin(router: RouterState, seq: int, envelope: bytes, with_meta: bool) -> bytes:
    data, meta_text = split(envelope, with_meta)
    source_id = topic_id(router.source)
    origin = {"idempotency_key": f"router:{router.name}:{source_id}:{SOURCE_EPOCH}:{seq}",
              "router": router.name, "source_topic": router.source,
              "source_topic_id": source_id, "source_epoch": SOURCE_EPOCH, "source_seq": seq}
    meta = orjson.loads(meta_text) if meta_text is not None else {}
    if isinstance(meta, dict):
        meta = {**meta, "_topics_router": origin}
    else:
        meta = {"_topics_router": origin, "_topics_original_meta": meta}
    return build(bytes(data), orjson.dumps(meta))

