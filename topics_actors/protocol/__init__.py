"""The wire protocol: msgpack envelopes over ZeroMQ. See docs/PROTOCOL.md.

Modules:
- `commit_feed.py`: the shards' commit notifications
- `control.py`: control kinds between child processes and the supervisor
- `envelope.py`: envelope and codec
- `head_table.py`: the shards' caught-up read answers in shared memory
- `lane.py`: the lane, a Unix stream socket between the gateway and a shard
- `messages.py`: request kinds between clients and shards or the node's front
- `packer.py`: msgpack packing with a Packer kept per thread
"""

from topics_actors.protocol.envelope import (  # noqa: F401
    PROTOCOL_VERSION, Message, decode, decode_reply, encode, encode_error, encode_reply,
)
