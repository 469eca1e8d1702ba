"""The wire protocol: msgpack envelopes over ZeroMQ. See docs/PROTOCOL.md."""

from topics_actors.protocol.envelope import (  # noqa: F401
    PROTOCOL_VERSION, Message, decode, decode_reply, encode, encode_error, encode_reply,
)
