"""The rules of one WebSocket on `GET /v0/ws` (spec/api.md 7.3) that need no sockets: a
client's text frame in, the operation it asks for (or the error frame to answer) out; who
may do what; the subscriptions and their cursors; every frame the server sends, as JSON.

Client operations: `subscribe` (read + the topic's prefix), `unsubscribe`, `publish`
(write + prefix, and admin when it carries a `config`), `ping`. A subscription has the
watch stream's semantics (spec/api.md 7.2: the diff of 5.6 from a cursor, one `record`
frame per page, `tombstone`, `caught_up` once per backlog -> live transition,
`topic_deleted`), except that a tombstone keeps the shard's reason (no `from_seq_too_old`
relabel) and no frame carries a composite cursor: `to_seq` of a topic's last `record`
frame is where a client resumes (`from_seq` of a later subscribe).

`request_id` is echoed verbatim, any JSON value (null when absent or when the frame was not
a JSON object). The socket shell is gateway/ws_connection.py.
"""

from __future__ import annotations

import dataclasses

import orjson

from topics_actors.errors import ErrorCode, TopicsError, invalid
from topics_actors.gateway import request_body as rb
from topics_actors.gateway.request_body import payload_too_large
from topics_actors.gateway.api_keys import ApiKey, check_name, check_scope
from topics_actors.gateway.route_table import ADMIN, READ, WRITE
from topics_actors.gateway.shared_reads import ReadView
from topics_actors.gateway.watch_request import WATCH_TOPICS_MAX, read_options, topic_entry
from topics_actors.watch_cursor import WatchCursors, WatchEvent

SUBSCRIBE_LIMIT_DEFAULT = 1_000
SUBSCRIBE_BATCH_BYTES_DEFAULT = 1_048_576
SOCKET_TOPICS_MAX = 1_024        # topics one socket is subscribed to at once
INVALID_JSON = "invalid_json"
UNSUPPORTED_MESSAGE = "unsupported_message"
SHUTTING_DOWN = "server_shutting_down"
_OPS = ("subscribe", "unsubscribe", "publish", "ping")
_PUSH_OPS = {"tombstone": "tombstone", "caught-up": "caught_up",
             "topic-deleted": "topic_deleted"}
RECORD_TEXTS_MAX = 64          # record frame texts a gateway keeps (recent shared pages)


@dataclasses.dataclass(frozen=True)
class Subscribe:
    request_id: object
    topics: dict            # name -> (from_seq, tail), in name order
    options: dict           # node, limit, max_batch_bytes, include_* (read_options)
    lenient: bool           # unknown topics are left out instead of failing the subscribe


@dataclasses.dataclass(frozen=True)
class Unsubscribe:
    request_id: object
    topics: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Publish:
    request_id: object
    topic: str
    body: dict              # the append's fields (spec/api.md 5.5), read by append_body
    return_seqs: bool


@dataclasses.dataclass(frozen=True)
class Ping:
    request_id: object


class OpError(Exception):
    """A client frame answered with an `error` frame (the socket stays open)."""

    def __init__(self, request_id: object, code: str, message: str, detail=None):
        super().__init__(message)
        self.request_id, self.code, self.message, self.detail = (request_id, code, message,
                                                                 detail)

    @classmethod
    def of(cls, request_id: object, error: TopicsError) -> "OpError":
        return cls(request_id, error.code.wire, error.message, error.detail)

    def frame(self) -> str:
        return error_frame(self.request_id, self.code, self.message, self.detail)


# --- client frames in --------------------------------------------------------------------------

def parse_op(text: str | None, binary: bool = False, frame_bytes_max: int = 0):
    """The operation a client frame asks for, or OpError (unsupported_message,
    payload_too_large over `frame_bytes_max` (TOPICS_MAX_BODY_BYTES; 0 = no limit),
    invalid_json, invalid_request)."""
    if binary or text is None:
        raise OpError(None, UNSUPPORTED_MESSAGE, "only JSON text frames are accepted")
    raw = text.encode("utf-8", "surrogatepass")
    if frame_bytes_max and len(raw) > frame_bytes_max:
        raise OpError.of(None, payload_too_large(frame_bytes_max))
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise OpError(None, INVALID_JSON, f"the frame is not valid JSON: {error.msg}") from None
    if not isinstance(value, dict):
        raise OpError(None, ErrorCode.INVALID_REQUEST.wire, "a frame must be a JSON object")
    request_id = value.get("request_id")
    try:
        rb.check_integers(raw, "the frame")
        return _op(value, request_id)
    except TopicsError as error:
        raise OpError.of(request_id, error) from None


def _op(body: dict, request_id: object):
    op = body.get("op")
    if op == "ping":
        return Ping(request_id)
    if op == "subscribe":
        return _subscribe(body, request_id)
    if op == "unsubscribe":
        return Unsubscribe(request_id, _unsubscribe_names(body))
    if op == "publish":
        topic = rb.field_str(body, "topic")
        if not topic:
            raise invalid("field 'topic' is required")
        return Publish(request_id, topic, body, rb.field_bool(body, "return_seqs", True))
    raise invalid(f"field 'op' must be one of {', '.join(_OPS)}")


def _subscribe(body: dict, request_id: object) -> Subscribe:
    topic, topics = body.get("topic"), body.get("topics")
    if (topic is None) == (topics is None):
        raise invalid("a subscribe names either 'topic' or 'topics'")
    if topic is not None:
        if not isinstance(topic, str) or not topic:
            raise invalid("field 'topic' must be a topic name")
        entries = {topic: topic_entry(topic, body)}
    else:
        if not isinstance(topics, dict):
            raise invalid("field 'topics' must map topic names to {from_seq, tail}")
        if not 1 <= len(topics) <= WATCH_TOPICS_MAX:
            raise invalid(f"a subscribe names 1 to {WATCH_TOPICS_MAX} topics, "
                          f"not {len(topics)}")
        entries = {name: topic_entry(name, topics[name]) for name in sorted(topics)}
    options = read_options(body, SUBSCRIBE_LIMIT_DEFAULT, SUBSCRIBE_BATCH_BYTES_DEFAULT)
    lenient = bool(rb.field_bool(body, "lenient", False))
    return Subscribe(request_id, entries, options, lenient)


def _unsubscribe_names(body: dict) -> tuple[str, ...]:
    topic, topics = body.get("topic"), body.get("topics")
    if (topic is None) == (topics is None):
        raise invalid("an unsubscribe names either 'topic' or 'topics'")
    names = [topic] if topic is not None else topics
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise invalid("field 'topics' must be a list of topic names")
    return tuple(dict.fromkeys(names))


def authorize(op, key: ApiKey | None) -> None:
    """The scope and prefix checks of an operation (spec/api.md 2), as OpError forbidden.
    `key` is None in dev mode."""
    try:
        if isinstance(op, Subscribe):
            check_scope(key, READ)
            for name in op.topics:
                check_name(key, name)
        elif isinstance(op, Publish):
            check_scope(key, WRITE)
            check_name(key, op.topic)
            if op.body.get("config") is not None:
                check_scope(key, ADMIN)
    except TopicsError as error:
        raise OpError.of(op.request_id, error) from None


# --- server frames out -------------------------------------------------------------------------

def _dumps(value: dict) -> str:
    """A frame's text."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:              # a request_id orjson cannot write back (too deep)
        return orjson.dumps({**value, "request_id": None}).decode()


def error_frame(request_id: object, code: str, message: str, detail=None) -> str:
    body = {"op": "error", "request_id": request_id, "code": code, "message": message}
    if detail is not None:
        body["detail"] = detail
    return _dumps(body)


def shutting_down_frame() -> str:
    return error_frame(None, SHUTTING_DOWN, "the server is shutting down; reconnect")


def pong(request_id: object) -> str:
    return _dumps({"op": "pong", "request_id": request_id})


def subscribed(request_id: object, states: dict) -> str:
    return _dumps({"op": "subscribed", "request_id": request_id, "topics": states})


def unsubscribed(request_id: object, names: list[str]) -> str:
    return _dumps({"op": "unsubscribed", "request_id": request_id, "topics": names})


def ack(request_id: object, reply: dict) -> str:
    """The shard's append reply (with `performance`) as an `ack`; `seqs` null when the
    publish asked for none."""
    body = {"op": "ack", "request_id": request_id, **reply}
    body.setdefault("seqs", None)
    return _dumps(body)


def push(event: WatchEvent, records: "RecordTexts") -> str:
    """A subscription event as a frame; a `record` frame's text comes from `records`."""
    if event.event == "record":
        return records.text(event.data)
    return '{"op":"' + _PUSH_OPS[event.event] + '",' + orjson.dumps(event.data)[1:].decode()


class RecordTexts:
    """The `record` frames of the shared pages (shared_reads.py), one text per page for
    every socket of the gateway: the page's rendered data line, `{"topic",...,"records":
    [...]}`, with `"op":"record"` spliced in front. Sockets woken by one commit push the same
    page one after another, so a few recent pages suffice; each entry holds its page, so
    the `id` it is keyed by cannot be reused while it is kept."""

    def __init__(self, pages_max: int = RECORD_TEXTS_MAX):
        self.pages_max = pages_max
        self.texts: dict[int, tuple[bytes, str]] = {}
        self.built = 0

    def text(self, data: bytes) -> str:
        hit = self.texts.get(id(data))
        if hit is not None and hit[0] is data:
            return hit[1]
        text = '{"op":"record",' + data[1:].decode()
        self.built += 1
        if len(self.texts) >= self.pages_max:
            del self.texts[next(iter(self.texts))]        # the oldest
        self.texts[id(data)] = (data, text)
        return text


# --- subscriptions -----------------------------------------------------------------------------

class Subscriptions:
    """The topics one socket watches: their cursors (moved by the pages read, as in a watch
    stream) and each topic's read options (those of the subscribe that named it last)."""

    def __init__(self, topics_max: int = SOCKET_TOPICS_MAX):
        self.cursors = WatchCursors({}, relabel=False, ids=False)
        self.views: dict[str, ReadView] = {}
        self.topics_max = topics_max

    def check_room(self, op: Subscribe) -> None:
        """OpError invalid_request when the subscribe would take the socket past its cap."""
        added = sum(1 for name in op.topics if name not in self.views)
        if len(self.views) + added > self.topics_max:
            raise OpError(op.request_id, ErrorCode.INVALID_REQUEST.wire,
                          f"a socket subscribes to at most {self.topics_max} topics",
                          {"max": self.topics_max})

    def subscribe(self, states: dict, options: dict) -> list[str]:
        """Watch each topic of `states` ({name: {from_seq, ...}}) from its `from_seq` with
        `options`; a topic already watched starts over. The names added."""
        view = ReadView.from_options(options)
        for name, state in states.items():
            self.cursors.add(name, state["from_seq"])
            self.views[name] = view
        return list(states)

    def unsubscribe(self, names: tuple[str, ...]) -> list[str]:
        """Stop watching `names`; the names that were watched."""
        removed = [name for name in names if self.cursors.remove(name)]
        for name in removed:
            del self.views[name]
        return removed

    def topics(self) -> list[str]:
        return list(self.views)

    def reading(self) -> list[str]:
        """The topics a round reads (subscribed, not deleted)."""
        return [name for name in self.views if name not in self.cursors.deleted]
