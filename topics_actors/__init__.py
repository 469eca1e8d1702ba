"""topics-actors: a persistent event engine built as a multiprocess actor system.

Its packages and the order of their imports: docs/ARCHITECTURE.md section 2. The modules of
the top level:
- `allocator_policy.py`: how a node process gives the C heap memory it freed back
- `child_process.py`: the start of every process the supervisor spawns
- `client_keys.py`: ZeroMQ client keys and the scopes of each request kind
- `collector_policy.py`: how a node process runs Python's cyclic garbage collector
- `config.py`: configuration as data
- `curve_auth.py`: CURVE on a process's client-facing TCP sockets
- `errors.py`: the exception tree of topics-actors
- `front_process.py`: the shell of the processes that reach the shards through the front
- `json_rules.py`: what JSON the engine takes as a record's data or meta
- `key_scopes.py`: what a key may do
- `libc.py`: the C library's calls that the standard library does not wrap (prctl, mallopt)
- `limits.py`: hard limits of the /v0 contract and engine bounds
- `process_profile.py`: an opt-in cProfile of a node process
- `progress_meter.py`: progress of a long job over a total known up front
- `record_batch.py`: validation of an append batch as it arrives on the wire
- `record_envelope.py`: the stored record envelope
- `server_keys.py`: the node's CURVE key pair, kept in the data directory
- `supervisor_link.py`: the child's side of the supervisor relationship
- `topic_config.py`: topic configuration
- `topic_identity.py`: stable topic identity and the topic -> shard map
- `topic_pages.py`: one page of topic names from the pages of several shards
- `watch_cursor.py`: a watch's composite cursor and how reads move it
"""

__version__ = "0.1.0"
