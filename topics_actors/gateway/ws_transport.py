"""A WebSocket on an HTTP connection of the gateway's server (gateway/http_server.py): the
upgrade's answer and then text frames both ways, for the WebSocket data plane
(gateway/ws_connection.py, docs/HTTP.md 14).

The framing is the `websockets` package's sans-I/O server protocol (RFC 6455: the
handshake, masking, fragments, control frames, the closing handshake); this module only
moves bytes between it and the connection's transport. Pings are answered by the protocol
itself; a message split in fragments is joined before it is returned.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from http import HTTPStatus

from websockets.frames import Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from topics_actors.gateway.ws_connection import ChannelClosed

MESSAGE_BYTES_MAX = 1024 * 1024     # a received message larger than this closes the socket
CLOSE_NORMAL = 1000


class _Warnings(logging.LoggerAdapter):
    """The protocol's log, warnings and worse only: it says "connection open" and
    "connection closed" at INFO for every socket."""

    def log(self, level, msg, *args, **kwargs):
        if level >= logging.WARNING:
            super().log(level, msg, *args, **kwargs)


_PROTOCOL_LOG = _Warnings(logging.getLogger(__name__), {})


class WsTransport:
    """What gateway_core.websocket needs of an upgrade: reject(status) or accept(), then
    receive() and send(text) until close()."""

    def __init__(self, conn, request):
        self.conn = conn                 # the HttpConnection (transport, flow control)
        self.request = request
        self.protocol = ServerProtocol(max_size=MESSAGE_BYTES_MAX, logger=_PROTOCOL_LOG)
        self.early = bytearray()         # bytes that came before accept()
        self.messages: collections.deque = collections.deque()
        self.fragments: list[bytes] | None = None
        self.fragment_binary = False
        self.waiter: asyncio.Future | None = None
        self.open = False
        self.ended = False               # the peer closed, or the connection was lost

    # --- from the connection -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self.open:
            self.early += data
            return
        self.protocol.receive_data(data)
        self._take_events()

    def lost(self) -> None:
        self.ended = True
        self._wake()

    # --- the upgrade -------------------------------------------------------------------------

    def reject(self, status: int) -> None:
        """A bare HTTP status, then the connection closes."""
        self.conn.transport.write(b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\n"
                                  b"connection: close\r\n\r\n"
                                  % (status, HTTPStatus(status).phrase.encode()))
        self.conn.close()

    async def accept(self) -> "WsTransport":
        # The protocol parses the handshake itself (its parser then reads frames): it gets
        # the request again, rebuilt from what the HTTP server parsed.
        head = b"".join(name.encode("latin-1") + b": " + value.encode("latin-1") + b"\r\n"
                        for name, value in self.request.headers.items())
        self.protocol.receive_data(b"GET / HTTP/1.1\r\n" + head + b"\r\n")
        requests = [e for e in self.protocol.events_received() if isinstance(e, Request)]
        if not requests:                         # the protocol could not read it
            self.reject(400)
            raise ChannelClosed()
        response = self.protocol.accept(requests[0])
        self.protocol.send_response(response)
        self._flush()
        if response.status_code != 101:          # not a valid WebSocket handshake
            self.conn.close()
            raise ChannelClosed()
        self.open = True
        if self.early:
            early, self.early = bytes(self.early), bytearray()
            self.data_received(early)
        return self

    # --- frames ------------------------------------------------------------------------------

    async def receive(self) -> tuple[str | None, bool]:
        """(text, False) for a text message; (None, True) for a binary one; (None, False)
        once the client closed or left."""
        while not self.messages:
            if self.ended:
                return None, False
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.messages.popleft()

    async def send(self, text: str) -> None:
        if self.ended or self.conn.closed:
            raise ChannelClosed()
        self.push(text)
        await self.conn.drain()
        if self.conn.closed:
            raise ChannelClosed()

    def ready(self) -> bool:
        return self.open and not self.ended and not self.conn.closed and \
            self.conn.writable()

    def push(self, *texts: str) -> None:
        """Text frames, written together."""
        for text in texts:
            self.protocol.send_text(text.encode())
        self._flush()

    def close(self) -> None:
        if not self.conn.closed:
            if self.open and not self.ended:
                self.protocol.send_close(CLOSE_NORMAL)
                self._flush()
            self.conn.close()

    # --- inside ------------------------------------------------------------------------------

    def _take_events(self) -> None:
        for frame in self.protocol.events_received():
            opcode = frame.opcode
            if opcode in (Opcode.TEXT, Opcode.BINARY):
                self.fragments = [frame.data]
                self.fragment_binary = opcode is Opcode.BINARY
            elif opcode is Opcode.CONT and self.fragments is not None:
                self.fragments.append(frame.data)
            elif opcode is Opcode.CLOSE:
                self.ended = True
            else:
                continue                 # ping, pong: the protocol answers them
            if frame.fin and self.fragments is not None:
                data, self.fragments = b"".join(self.fragments), None
                self.messages.append((None, True) if self.fragment_binary
                                     else (data.decode(), False))
        self._flush()
        if self.protocol.close_expected() or self.ended:
            self.ended = True
        self._wake()

    def _flush(self) -> None:
        out = self.protocol.data_to_send()
        if out and not self.conn.closed:
            self.conn.transport.write(b"".join(out))

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        self.waiter = None
