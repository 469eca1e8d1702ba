"""ZeroMQ client library: `Client` (blocking) and `AsyncClient` (asyncio).

Results are dicts with the field names of the /v0 HTTP API; errors raise TopicsError whose
`.code` is the API's ErrorCode (`.code.wire` is the string, `.status` the HTTP status).

Modules (one core, two transports, on httpx's model):
- `sync_client.py`, `async_client.py`: the public clients (and `NodeClient`, the
  gateway's), thin: each method runs an operation of the core on its transport.
- `client_core.py`: the sans-IO core: each operation's request and reply shaping, routing,
  retries, as flows of steps (Call, Pause, Fan, Refusal).
- `blocking_transport.py`, `async_transport.py`: run flows, one socket per target (blocking)
  or many requests in flight per connection (asyncio: `async_connection.py` one DEALER,
  `lane_connection.py` a shard's lane; `reply_waits.py` the replies either waits for).
- `linger_batcher.py`: linger batching, once (lanes, when a batch goes, its request, each
  caller's cut of the reply); `linger_sender.py` runs it on a thread (Client),
  `async_linger.py` on the event loop (AsyncClient, and the gateway's coalescer).
- `request_shapes.py`: building requests and shaping replies into API dicts.
- `router_admin.py`: the node-wide router rules as generators of requests.
- `shard_map.py`, `leader_map.py`: where a topic's requests go (its shard; a replicated
  topic's leader); `retry_budget.py`: how long a request is retried.
- `front_discovery.py`: the front's address from an HTTP URL; `curve_credentials.py`:
  CURVE keys and telling a refused handshake from an absent node.
- `topic_watch.py`, `blocking_watch.py`: `watch` as an async and a blocking iterator.
"""

from topics_actors.client.async_client import AsyncClient
from topics_actors.client.sync_client import Client
from topics_actors.errors import ErrorCode, TopicsError

__all__ = ["AsyncClient", "Client", "ErrorCode", "TopicsError"]
