"""The gateway: the /v0 HTTP API in front of the shards (docs/HTTP.md).

A gateway process holds no topic state. `http_server` is its HTTP/1.1 server on the
process's event loop (httptools; `h2_session` serves HTTP/2 with prior knowledge and
`ws_transport` the WebSocket framing on its connections);
`gateway_core` is the request-handling core (routing, auth, validation, the error envelope),
which talks to the engine only through an `EngineLink` and is tested without sockets.

Modules:
- `api_keys.py`: API keys
- `append_body.py`: an HTTP append body checked and turned into the shard's Append
- `append_coalescer.py`: concurrent appends to one topic sent to its shard as one Append
- `claim_page.py`: a claim reply from the shard rendered as the /v0 JSON body
- `commit_listener.py`: the gateway's side of the commit feed
- `console_files.py`: the console's static files
- `diff_page.py`: a diff reply from the shard rendered as the /v0 JSON body
- `engine_link.py`: the gateway's way to the engine
- `feed_connection.py`: one shard's commit feed, connected and subscribed
- `gateway_core.py`: the request-handling core of the gateway
- `gateway_server.py`: one gateway process
- `gateway_settings.py`: the gateway's settings from TOPICS_* environment variables
- `h2_session.py`: HTTP/2 over cleartext with prior knowledge on a gateway connection
- `head_reads.py`: caught-up diffs answered from the shards' head tables
- `http_message.py`: the gateway's own HTTP request and response records
- `http_server.py`: the gateway's HTTP/1.1 server
- `inflight_limit.py`: requests in flight per key (TOPICS_MAX_INFLIGHT_PER_KEY)
- `metrics_report.py`: the /v0/metrics body, in text and JSON
- `probe_api.py`: health, readiness, metrics and the cluster view (their handlers)
- `quarantine_api.py`: the node's recovery quarantine as HTTP shows it
- `copy_compare.py`: GET /v0/topics/:t/checksum, a topic's in-sync copies compared
- `cluster_moves.py`: POST /v0/cluster/move and /drain, replicas moved between nodes
- `queue_api.py`: the queue endpoints of the gateway
- `replication_report.py`: the node's replication figures, gathered from its shards'
  statuses
- `request_body.py`: reading what a request carries
- `request_stats.py`: HTTP requests and their latency per route
- `route_table.py`: which handler answers a method and path, and the scope it needs
- `router_api.py`: the router endpoints of the gateway
- `shared_reads.py`: reads of watched topics shared by every watch stream of a gateway
- `sse_frame.py`: server-sent-event framing of a watch stream and its composite cursor
- `stream_api.py`: the watch endpoints of the gateway
- `topic_api.py`: the topic and record endpoints of the gateway
- `topic_listing.py`: a page of GET /v0/topics, filtered by the key's prefixes
- `watch_request.py`: the rules of a watch session that need no sockets
- `watch_service.py`: watch sessions over HTTP
- `watch_stream.py`: one watch stream
- `work_service.py`: queue work streams over HTTP
- `work_stream.py`: one queue work stream
- `ws_connection.py`: one WebSocket on GET /v0/ws, once accepted
- `ws_service.py`: WebSockets on GET /v0/ws, for one gateway process
- `ws_session.py`: the rules of one WebSocket on GET /v0/ws that need no sockets
- `ws_transport.py`: a WebSocket on an HTTP connection of the gateway's server
"""
