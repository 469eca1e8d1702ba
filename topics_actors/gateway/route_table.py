"""Which handler answers a method and path, and the scope it needs (spec/api.md 1, 2, 4).

A table keyed by path shape; the topic segment arrives percent-decoded from the server. An
unknown path is 404 `not_found`, a known path with another method 405 `method_not_allowed`.
"""

from __future__ import annotations

import dataclasses

from topics_actors.errors import ErrorCode, TopicsError

READ, WRITE, DELETE, ADMIN = "read", "write", "delete", "admin"
PROBE = "probe"       # health and readiness: open unless TOPICS_PROBE_AUTH


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    handler: str                  # name of the GatewayCore method that answers
    scope: str                    # READ | WRITE | DELETE | ADMIN | PROBE
    topic: str | None = None      # the topic path segment, when the route has one


# path -> {method: (handler, scope)}
_FIXED = {
    "/healthz": {"GET": ("health", PROBE)},
    "/v0/health": {"GET": ("health", PROBE)},
    "/readyz": {"GET": ("ready", PROBE)},
    "/v0/ready": {"GET": ("ready", PROBE)},
    "/v0/metrics": {"GET": ("metrics", READ)},
    "/v0/topics": {"GET": ("list_topics", READ)},
}
_TOPIC = {"PUT": ("put_topic", ADMIN), "GET": ("get_topic", READ),
          "DELETE": ("delete_topic", DELETE), "POST": ("append", WRITE)}
_TOPIC_SUB = {
    "diff": {"POST": ("diff", READ)},
    "delete": {"POST": ("delete_records", DELETE)},
    # Queues (spec/api.md 8). A claim needs read too: gateway/queue_api.py checks it.
    "claim": {"POST": ("claim", WRITE)},
    "ack": {"POST": ("ack", WRITE)},
    "nack": {"POST": ("nack", WRITE)},
    "extend": {"POST": ("extend", WRITE)},
}
# Sub-paths of the full API that this build does not serve (the queue's SSE stream,
# spec/api.md 8): they answer 404 after the write-scope check every unknown sub-path gets.
_NOT_SERVED = ("work",)
_TOPICS_PREFIX = "/v0/topics/"


def not_found(what: str = "no such route") -> TopicsError:
    return TopicsError(what, ErrorCode.NOT_FOUND)


def _pick(methods: dict, method: str, topic: str | None) -> Route:
    found = methods.get(method)
    if found is None:
        raise TopicsError(f"method {method} is not allowed here; allowed: "
                          f"{', '.join(sorted(methods))}", ErrorCode.METHOD_NOT_ALLOWED)
    return Route(found[0], found[1], topic)


def resolve(method: str, path: str) -> Route:
    """The route for `method` and `path`, or a TopicsError (404 not_found / 405)."""
    fixed = _FIXED.get(path)
    if fixed is not None:
        return _pick(fixed, method, None)
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
    return Route("unknown", WRITE, topic)   # needs write (403 before 404), then 404


def unknown_route_error(route: Route, path: str) -> TopicsError:
    sub = path.rsplit("/", 1)[-1]
    if sub in _NOT_SERVED:
        return not_found(f"queue operation {sub!r} is not served by this build")
    return not_found()
