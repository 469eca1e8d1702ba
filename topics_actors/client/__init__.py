"""ZeroMQ client library: `Client` (blocking) and `AsyncClient` (asyncio).

Results are dicts with the field names of the /v0 HTTP API; errors raise TopicsError whose
`.code` is the API's ErrorCode (`.code.wire` is the string, `.status` the HTTP status).
"""

from topics_actors.client.async_client import AsyncClient
from topics_actors.client.sync_client import Client
from topics_actors.errors import ErrorCode, TopicsError

__all__ = ["AsyncClient", "Client", "ErrorCode", "TopicsError"]
