"""The gateway: the /v0 HTTP API in front of the shards (docs/HTTP.md).

A gateway process holds no topic state. `http_server` is the thin RSGI adapter on granian;
`gateway_core` is the request-handling core (routing, auth, validation, the error envelope),
which talks to the engine only through an `EngineLink` and is tested without sockets.
"""
