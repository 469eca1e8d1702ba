"""Finding a node's ZeroMQ front from its HTTP URL.

`Client("http://host:4000")` means the node whose /v0 API is there: its front is on the
same host, at the port that `GET /v0/health` reports as `zmq_port` (TOPICS_ZMQ_PORT, by
default the HTTP port + 1). One request, bounded by a timeout, when the client is built.
"""

from __future__ import annotations

import urllib.parse

import orjson

from topics_actors.client.retry_budget import unavailable
from topics_actors.errors import ErrorCode, TopicsError

HTTP_SCHEMES = ("http", "https")


def front_endpoint(endpoint: str, timeout_ms: int, api_key: str | None = None) -> str:
    """The ZeroMQ endpoint to connect to: `endpoint` itself unless it is an http(s):// URL,
    then tcp://<its host>:<the zmq_port of its /v0/health>. `api_key` is needed only when
    the node sets TOPICS_PROBE_AUTH."""
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme not in HTTP_SCHEMES:
        return endpoint
    host = url.hostname or "127.0.0.1"
    health = _get_health(url, host, timeout_ms, api_key)
    port = health.get("zmq_port") if isinstance(health, dict) else None
    if not isinstance(port, int) or not 0 < port < 65536:
        raise TopicsError(f"{endpoint}/v0/health names no ZeroMQ port (zmq_port)",
                          ErrorCode.INTERNAL, {"health": health})
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def _get_health(url: urllib.parse.SplitResult, host: str, timeout_ms: int,
                api_key: str | None):
    import http.client      # here: http.client and email are 2.6 MB a node's processes skip
    connection_type = (http.client.HTTPSConnection if url.scheme == "https"
                       else http.client.HTTPConnection)
    conn = connection_type(host, url.port, timeout=timeout_ms / 1000)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        conn.request("GET", url.path.rstrip("/") + "/v0/health", headers=headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException):
        raise unavailable(f"the node at {url.geturl()}") from None
    finally:
        conn.close()
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if response.status != 200:
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            raise TopicsError.from_wire(parsed["error"])
        raise TopicsError(f"{url.geturl()}/v0/health answered {response.status}")
    return parsed
