"""What the front does with a client's request, without sockets.

`status` is answered from the supervisor's latest shard map. A request about a topic goes
to the shard owning it (the routing rule clients use, docs/PROTOCOL.md 12) under a corr of
the front's (forward_table), and the shard's reply goes back to the client unchanged but
for the corr. `list_topics`, `list_routers` and `delete_routers` go to every shard and
the answers are merged into one. The
shards are reached on their ipc sockets, which trust a `prevalidated` append; a forwarded
append never carries that mark (it is cleared here), so a remote client gets no more trust
through the front than on a shard's TCP socket.

Every call returns Effects: replies to client peers and requests to shards. The shell
(front_relay) only moves bytes.
"""

from __future__ import annotations

import dataclasses

from topics_actors.config import ProcessState
from topics_actors.errors import ErrorCode, ProtocolError, TopicsError
from topics_actors.limits import CLAIM_WAIT_MS_MAX, DIFF_WAIT_MS_MAX, LIST_LIMIT_MAX, clamp
from topics_actors.protocol import decode, decode_reply, encode, encode_error, encode_reply
from topics_actors.protocol.envelope import with_corr
from topics_actors.protocol.messages import (
    Ack, Append, Claim, DeleteRecords, DeleteRouters, DeleteTopic, Diff, Extend, GetTopic, Held,
    ListRouters, ListTopics, Nack, PutRouter, PutTopic, Reassign, RepairTopic, RouterSync, Scan,
    Status, Checksum,
)
from topics_actors.topic_identity import shard_of_name
from topics_actors.topic_pages import merged_topics
from .forward_table import ForwardTable, Gather, Pending, TableFull

FORWARD_TIMEOUT_MS = 4_000     # below the library's 5 s request timeout: the client hears why
IN_FLIGHT_MAX = 16_384
TOPIC_KINDS = (Append, Diff, Scan, PutTopic, GetTopic, DeleteTopic, DeleteRecords, Claim, Ack,
               Nack, Extend, Held, PutRouter, RouterSync, RepairTopic, Checksum)
NODE_KINDS = (ListTopics, ListRouters, DeleteRouters)       # asked of every shard


@dataclasses.dataclass
class Effects:
    replies: list[tuple[bytes, bytes]] = dataclasses.field(default_factory=list)
    sends: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)   # (shard, raw)
    # (peer, corr, msg): requests the node answers itself (a reassignment: its cluster member)
    node_calls: list[tuple[bytes, int, object]] = dataclasses.field(default_factory=list)

    def error(self, peer: bytes, corr: int, error: TopicsError) -> None:
        self.replies.append((peer, encode_error(corr, error)))


def _not_ready(shard: int, reason: str) -> TopicsError:
    return TopicsError(f"shard {shard} {reason}", ErrorCode.NOT_READY,
                       {"shard": shard, "reason": reason})


def _extra_wait_ms(msg) -> int:
    """What a shard may take on top of a quick reply: a long poll, a claim window."""
    if type(msg) is Diff:
        return clamp(msg.wait_ms, 0, DIFF_WAIT_MS_MAX)
    return CLAIM_WAIT_MS_MAX if type(msg) is Claim else 0


class FrontCore:
    """`authorize(identity, msg)` raises TopicsError when the peer may not send `msg`
    (CURVE keys, client_keys); None lets everything through."""

    def __init__(self, timeout_ms: int = FORWARD_TIMEOUT_MS, capacity: int = IN_FLIGHT_MAX,
                 authorize=None):
        self.timeout_ns = timeout_ms * 1_000_000
        self.table = ForwardTable(capacity)
        self.authorize = authorize
        self.shard_map: dict = {"shard_count": 0, "shards": []}

    # --- the supervisor's view ---------------------------------------------------------------

    def update_map(self, shard_map: dict) -> Effects:
        """Take the supervisor's new map; requests waiting on a shard that is no longer the
        same ready process are answered `not_ready` now (the client retries)."""
        old = {s["shard"]: s for s in self.shard_map["shards"]}
        self.shard_map = shard_map
        gone = {s["shard"] for s in shard_map["shards"]
                if s["state"] != ProcessState.READY
                or old.get(s["shard"], s)["incarnation"] != s["incarnation"]}
        effects = Effects()
        for pending in self.table.of_shards(gone):
            self._fail(effects, pending, _not_ready(pending.shard, "went down"))
        return effects

    def ipc_endpoints(self) -> dict[int, str]:
        return {s["shard"]: s["ipc"] for s in self.shard_map["shards"] if s.get("ipc")}

    # --- requests and replies --------------------------------------------------------------

    def request(self, peer: bytes, raw: bytes, now_ns: int, identity=None,
                trusted: bool = False) -> Effects:
        """`trusted`: from the node's own processes (the ipc front), never checked."""
        effects = Effects()
        corr = 0
        try:
            corr, msg = decode(raw)
            if self.authorize is not None and not trusted:
                self.authorize(identity, msg)
            if type(msg) is Status:
                effects.replies.append((peer, encode_reply(corr, self.shard_map)))
            elif type(msg) in NODE_KINDS:
                self._gather(effects, peer, corr, msg, now_ns)
            elif type(msg) in TOPIC_KINDS:
                self._forward(effects, peer, corr, msg, raw, now_ns)
            elif type(msg) is Reassign:
                effects.node_calls.append((peer, corr, msg))
            else:
                raise ProtocolError(f"the front does not forward {msg.KIND} (a request of "
                                    f"the node's own processes)")
        except TopicsError as error:
            effects.error(peer, getattr(error, "corr", None) or corr, error)
        return effects

    def _target(self, shard: int) -> None:
        shards = self.shard_map["shards"]
        if (shard >= len(shards) or shards[shard]["state"] != ProcessState.READY
                or not shards[shard]["ipc"]):
            raise _not_ready(shard, "is not ready")

    def _add(self, pending: Pending) -> int:
        try:
            return self.table.add(pending)
        except TableFull:
            raise TopicsError("the front has too many requests in flight",
                              ErrorCode.THROTTLED, {"retry_after_ms": 100}) from None

    def _forward(self, effects: Effects, peer: bytes, corr: int, msg, raw: bytes,
                 now_ns: int) -> None:
        shard = shard_of_name(msg.topic, self.shard_map["shard_count"])
        self._target(shard)
        deadline_ns = now_ns + self.timeout_ns + _extra_wait_ms(msg) * 1_000_000
        forward_corr = self._add(Pending(peer, corr, shard, deadline_ns))
        if type(msg) is Append and msg.prevalidated:   # trusted on ipc: never a client's
            raw = encode(dataclasses.replace(msg, prevalidated=False), forward_corr)
        else:
            raw = with_corr(raw, forward_corr)[1]
        effects.sends.append((shard, raw))

    def _gather(self, effects: Effects, peer: bytes, corr: int, msg, now_ns: int) -> None:
        count = self.shard_map["shard_count"]
        for shard in range(count):
            self._target(shard)
        gather = Gather(count)
        deadline_ns = now_ns + self.timeout_ns
        for shard in range(count):
            forward_corr = self._add(Pending(peer, corr, shard, deadline_ns, msg, gather))
            effects.sends.append((shard, encode(msg, forward_corr)))

    def shard_reply(self, raw: bytes) -> Effects:
        """One envelope of a shard's (coalesced) reply message."""
        effects = Effects()
        try:
            forward_corr, _ = with_corr(raw, 0)
        except ProtocolError:
            return effects       # not from a shard of ours: nothing to match it with
        pending = self.table.take(forward_corr)
        if pending is None:
            return effects       # answered already (expired, or its shard went down)
        if pending.gather is None:
            effects.replies.append((pending.peer, with_corr(raw, pending.corr)[1]))
            return effects
        try:
            pending.gather.pages[pending.shard] = decode_reply(raw)[1]
        except TopicsError as error:
            self._fail(effects, pending, error)
            return effects
        if pending.gather.complete() and not pending.gather.done:
            pending.gather.done = True
            effects.replies.append((pending.peer, encode_reply(pending.corr,
                                                               _merged(pending))))
        return effects

    def unsent(self, raw: bytes) -> Effects:
        """A request the shell could not hand to its shard (not connected, queue full)."""
        effects = Effects()
        pending = self.table.take(with_corr(raw, 0)[0])
        if pending is not None:
            self._fail(effects, pending, _not_ready(pending.shard, "cannot be reached"))
        return effects

    def expire(self, now_ns: int) -> Effects:
        effects = Effects()
        for pending in self.table.expired(now_ns):
            self._fail(effects, pending, _not_ready(pending.shard,
                                                    "did not answer the forwarded request"))
        return effects

    def _fail(self, effects: Effects, pending: Pending, error: TopicsError) -> None:
        if pending.gather is not None:
            if pending.gather.done:
                return
            pending.gather.done = True
        effects.error(pending.peer, pending.corr, error)


def _merged(pending: Pending) -> dict:
    """Every shard's answer as one, what the shards would answer if they were one (the
    client's merge of a single answer gives the same result): one list page of topics, all
    the routers, all the deleted router names."""
    pages = [pending.gather.pages[s] for s in sorted(pending.gather.pages)]
    performance = pages[0].get("performance", {})
    if type(pending.msg) is ListRouters:
        return {"routers": [r for page in pages for r in page["routers"]],
                "performance": performance}
    if type(pending.msg) is DeleteRouters:
        return {"deleted": [n for page in pages for n in page["deleted"]],
                "performance": performance}
    topics, more = merged_topics(pages, clamp(pending.msg.limit, 1, LIST_LIMIT_MAX))
    return {"topics": topics, "more": more, "performance": performance}
