"""The gateway: the /v0 HTTP API in front of the shards (docs/HTTP.md).

A gateway process holds no topic state. `http_server` is its HTTP/1.1 server on the
process's event loop (httptools; `h2_session` serves HTTP/2 with prior knowledge and
`ws_transport` the WebSocket framing on its connections);
`gateway_core` is the request-handling core (routing, auth, validation, the error envelope),
which talks to the engine only through an `EngineLink` and is tested without sockets.
"""
