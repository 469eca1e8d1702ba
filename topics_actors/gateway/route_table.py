"""Which handler answers a method and path, and the scope it needs (spec/api.md 1, 2, 4).

A table keyed by path shape; the topic segment arrives percent-decoded from the server. An
unknown path is 404 `not_found`, a known path with another method 405 `method_not_allowed`.
"""

from __future__ import annotations

import dataclasses

from topics_actors.errors import ErrorCode, TopicsError

READ, WRITE, DELETE, ADMIN = "read", "write", "delete", "admin"
PROBE = "probe"       # health and readiness: open unless TOPICS_PROBE_AUTH
SESSION = "session"   # a watch stream or WebSocket: its handler checks the key (spec/api.md 7)
PUBLIC = "public"     # the console's static files: no data in them, never a key
# A queue claim leases jobs (a write) and hands their records out (a read): it needs both,
# as in the reference's auth.rs; so does the `/work` stream, which claims.
READ_WRITE = (READ, WRITE)


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    handler: str                  # name of the GatewayCore method that answers
    scope: str | tuple[str, ...]  # READ | WRITE | DELETE | ADMIN | READ_WRITE | PROBE | SESSION
    topic: str | None = None      # the topic (or router) path segment, when there is one
    wid: str | None = None        # the watch session of /v0/watch/:wid


# path -> {method: (handler, scope)}
_HEALTH = {"GET": ("health", PROBE), "HEAD": ("health", PROBE)}
_READY = {"GET": ("ready", PROBE), "HEAD": ("ready", PROBE)}
_FIXED = {
    "/healthz": _HEALTH,
    "/v0/health": _HEALTH,
    "/readyz": _READY,
    "/v0/ready": _READY,
    "/v0/metrics": {"GET": ("metrics", READ)},
    "/v0/cluster": {"GET": ("cluster", READ)},
    "/v0/cluster/move": {"POST": ("cluster_move", ADMIN)},      # docs/CLUSTER.md 8
    "/v0/cluster/drain": {"POST": ("cluster_drain", ADMIN)},
    "/v0/topics": {"GET": ("list_topics", READ)},
    "/v0/watch": {"POST": ("watch_create", READ)},
    "/v0/ws": {"GET": ("websocket", SESSION)},     # the upgrade checks the key (ws_service)
    "/v0/routers": {"GET": ("list_routers", READ)},
    "/v0/quarantine": {"GET": ("quarantine_list", ADMIN)},
    **{path: {"GET": ("console", PUBLIC), "HEAD": ("console", PUBLIC)}
       for path in ("/console", "/console/", "/console/console.js")},
}
_ROUTERS_PREFIX = "/v0/routers/"
_ROUTER = {"PUT": ("put_router", ADMIN), "GET": ("get_router", READ),
           "DELETE": ("delete_router", DELETE)}
_WATCH_PREFIX = "/v0/watch/"
_WATCH = {"GET": ("watch_stream", SESSION)}
_TOPIC = {"PUT": ("put_topic", ADMIN), "GET": ("get_topic", READ),
          "DELETE": ("delete_topic", DELETE), "POST": ("append", WRITE)}
_TOPIC_SUB = {
    "diff": {"POST": ("diff", READ)},
    "delete": {"POST": ("delete_records", DELETE)},
    # Queues (spec/api.md 8).
    "claim": {"POST": ("claim", READ_WRITE)},
    "ack": {"POST": ("ack", WRITE)},
    "nack": {"POST": ("nack", WRITE)},
    "extend": {"POST": ("extend", WRITE)},
    # The queue's SSE stream; `?token=` stands for the header.
    "work": {"GET": ("work_stream", READ_WRITE)},
    # Do the in-sync replicas agree over a seq range? (docs/CLUSTER.md 9)
    "checksum": {"GET": ("checksum", READ)},
}
# Sub-paths of the full API that this build does not serve: they answer 404 after the
# write-scope check every unknown sub-path gets. (None now: `work` is served.)
_NOT_SERVED: tuple[str, ...] = ()
# Routes whose key may come as `?token=` (spec/api.md 2: the SSE GETs).
TOKEN_HANDLERS = ("work_stream",)
# Routes a stopping gateway refuses (503 shutting_down) once their key and scope passed:
# readiness, and the streams that would outlive the stop.
STOPPING_REFUSED = frozenset({"ready", "watch_stream", "work_stream"})
_TOPICS_PREFIX = "/v0/topics/"
_QUARANTINE_PREFIX, _REPAIR_SUFFIX = "/v0/quarantine/", "/repair"   # recovery quarantine
_REPAIR = {"POST": ("quarantine_repair", ADMIN)}
UNKNOWN = "unknown"       # a sub-path of a topic that no route serves (404 after the scope)
UNMATCHED = "unmatched"   # no route at all: 404 not_found or 405; a metrics label only


def not_found(what: str = "no such route") -> TopicsError:
    return TopicsError(what, ErrorCode.NOT_FOUND)


class MethodNotAllowed(TopicsError):
    """405, with the methods the path does take (the response's Allow header)."""
    default_code = ErrorCode.METHOD_NOT_ALLOWED

    def __init__(self, method: str, allowed: list[str]):
        super().__init__(f"method {method} is not allowed here; allowed: "
                         f"{', '.join(allowed)}")
        self.allow = ", ".join(allowed)


def _pick(methods: dict, method: str, topic: str | None) -> Route:
    found = methods.get(method)
    if found is None:
        raise MethodNotAllowed(method, sorted(methods))
    return Route(found[0], found[1], topic)


def resolve(method: str, path: str) -> Route:
    """The route for `method` and `path`, or a TopicsError (404 not_found / 405)."""
    fixed = _FIXED.get(path)
    if fixed is not None:
        return _pick(fixed, method, None)
    if path.startswith(_WATCH_PREFIX):
        wid = path[len(_WATCH_PREFIX):]
        if not wid or "/" in wid:
            raise not_found()
        found = _pick(_WATCH, method, None)
        return Route(found.handler, found.scope, wid=wid)
    if path.startswith(_ROUTERS_PREFIX):
        router = path[len(_ROUTERS_PREFIX):]
        if not router or "/" in router:
            raise not_found()
        return _pick(_ROUTER, method, router)   # its name is prefix-checked like a topic's
    if path.startswith(_QUARANTINE_PREFIX) and path.endswith(_REPAIR_SUFFIX):
        topic = path[len(_QUARANTINE_PREFIX):-len(_REPAIR_SUFFIX)]
        if not topic or "/" in topic:
            raise not_found()
        return _pick(_REPAIR, method, topic)
    if not path.startswith(_TOPICS_PREFIX):
        raise not_found()
    rest = path[len(_TOPICS_PREFIX):]
    topic, slash, sub = rest.partition("/")
    if not topic:
        raise not_found()
    if not slash:
        return _pick(_TOPIC, method, topic)
    methods = _TOPIC_SUB.get(sub)
    if methods is not None:
        return _pick(methods, method, topic)
    return Route(UNKNOWN, WRITE, topic)   # needs write (403 before 404), then 404


def handler_names() -> tuple[str, ...]:
    """Every handler a request can end in, UNMATCHED included: the closed set of route
    labels of the request metrics (request_stats.py), never a raw path."""
    tables = (*_FIXED.values(), _WATCH, _TOPIC, _ROUTER, *_TOPIC_SUB.values(), _REPAIR)
    names = {handler for table in tables for handler, _scope in table.values()}
    return tuple(sorted(names | {UNKNOWN, UNMATCHED}))


def handler_of(method: str, path: str) -> str:
    """The handler that answers `method` and `path`, or UNMATCHED."""
    try:
        return resolve(method, path).handler
    except TopicsError:
        return UNMATCHED


def unknown_route_error(route: Route, path: str) -> TopicsError:
    sub = path.rsplit("/", 1)[-1]
    if sub in _NOT_SERVED:
        return not_found(f"queue operation {sub!r} is not served by this build")
    return not_found()
