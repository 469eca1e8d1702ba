"""HTTP/2 over cleartext with prior knowledge (h2c) on a gateway connection: a client that
opens with the HTTP/2 preface gets the same API as over HTTP/1.1 (the reference server,
on hyper, serves both on one port, and its conformance probe checks h2c).

The framing, HPACK and flow-control bookkeeping are the `h2` package's (sans-I/O); this
module moves bytes between it and the connection's transport and runs one task per
request stream, so streams answer in whatever order they finish. A response body is sent
as the peer's flow-control windows allow; a server-sent-event stream is a response whose
DATA frames come as its chunks do.
"""

from __future__ import annotations

import asyncio
import logging

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from topics_actors.gateway.http_message import HttpRequest, HttpStream, split_target

log = logging.getLogger(__name__)

STREAMS_MAX = 128          # concurrent request streams per connection


class _Incoming:
    __slots__ = ("headers", "body", "size", "refused")

    def __init__(self, headers: dict):
        self.headers = headers
        self.body: list[bytes] = []
        self.size = 0
        self.refused = False


class H2Session:
    def __init__(self, conn):
        self.conn = conn                  # the HttpConnection: transport, server, closed
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=False, header_encoding=None))
        self.h2.local_settings = h2.settings.Settings(
            client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS:
                                          STREAMS_MAX})
        self.h2.initiate_connection()
        self.incoming: dict[int, _Incoming] = {}
        self.tasks: dict[int, asyncio.Task] = {}
        self.windows: dict[int, asyncio.Future] = {}
        self.flush()

    # --- from the connection -----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.flush()
            self.conn.close()
            return
        for event in events:
            self._event(event)
        self.flush()

    def lost(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        self._wake_windows()

    def busy(self) -> bool:
        return bool(self.tasks or self.incoming)

    # --- events ------------------------------------------------------------------------------

    def _event(self, event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {name.decode("latin-1"): value.decode("latin-1")
                       for name, value in event.headers}
            self.incoming[event.stream_id] = _Incoming(headers)
        elif isinstance(event, h2.events.DataReceived):
            self._body(event)
        elif isinstance(event, h2.events.StreamEnded):
            self._dispatch(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.incoming.pop(event.stream_id, None)
            task = self.tasks.pop(event.stream_id, None)
            if task is not None:
                task.cancel()
        elif isinstance(event, h2.events.WindowUpdated):
            self._wake_windows()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.conn.close()

    def _body(self, event) -> None:
        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        incoming = self.incoming.get(event.stream_id)
        if incoming is None or incoming.refused:
            return
        incoming.size += len(event.data)
        limit = self.conn.server.body_bytes_max
        if limit and incoming.size > limit:
            incoming.refused = True
            request = self._request(incoming)
            response = self.conn.server.too_large(request.method.encode(), request.path)
            self._start(event.stream_id, self._send_response(event.stream_id, response, False))
        else:
            incoming.body.append(event.data)

    def _dispatch(self, stream_id: int) -> None:
        incoming = self.incoming.pop(stream_id, None)
        if incoming is None or incoming.refused:
            return
        self._start(stream_id, self._serve(stream_id, self._request(incoming)))

    def _request(self, incoming: _Incoming) -> HttpRequest:
        headers = incoming.headers
        path, query = split_target(headers.get(":path", "/").encode("latin-1"))
        plain = {k: v for k, v in headers.items() if not k.startswith(":")}
        if ":authority" in headers:
            plain.setdefault("host", headers[":authority"])
        return HttpRequest(headers.get(":method", "GET"), path, query, plain,
                           b"".join(incoming.body))

    def _start(self, stream_id: int, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks[stream_id] = task
        task.add_done_callback(lambda _: self.tasks.pop(stream_id, None))

    # --- answering ---------------------------------------------------------------------------

    async def _serve(self, stream_id: int, request: HttpRequest) -> None:
        server = self.conn.server
        server.in_flight += 1
        try:
            response = await server.answer(request)
            if response is None:
                self.conn.close()
            elif isinstance(response, HttpStream):
                await self._send_stream(stream_id, response)
            else:
                await self._send_response(stream_id, response, request.method == "HEAD")
        except h2.exceptions.StreamClosedError:
            pass                                # the client reset the stream meanwhile
        finally:
            server.in_flight -= 1

    async def _send_response(self, stream_id: int, response, head_only: bool) -> None:
        body = response.body
        self._headers(stream_id, response, [("content-length", str(len(body)))],
                      end=head_only or not body)
        if body and not head_only:
            await self._data(stream_id, body, end=True)

    async def _send_stream(self, stream_id: int, response: HttpStream) -> None:
        chunks = response.chunks
        self._headers(stream_id, response, [], end=False)
        try:
            async for chunk in chunks:
                await self._data(stream_id, chunk, end=False)
                await self.conn.drain()
            await self._data(stream_id, b"", end=True)
        finally:
            await chunks.aclose()

    def _headers(self, stream_id: int, response, extra: list, end: bool) -> None:
        headers = [(":status", str(response.status)), *response.header_list(), *extra]
        self.h2.send_headers(stream_id, [(k.encode("latin-1"), v.encode("latin-1"))
                                         for k, v in headers], end_stream=end)
        self.flush()

    async def _data(self, stream_id: int, data: bytes, end: bool) -> None:
        """Send `data` as the flow-control windows open; `end` ends the stream."""
        view = memoryview(data)
        while view and not self.conn.closed:
            window = min(self.h2.local_flow_control_window(stream_id),
                         self.h2.max_outbound_frame_size)
            if window <= 0:
                await self._window_opens(stream_id)
                continue
            self.h2.send_data(stream_id, bytes(view[:window]))
            view = view[window:]
            self.flush()
        if end and not self.conn.closed:
            self.h2.end_stream(stream_id)
            self.flush()

    async def _window_opens(self, stream_id: int) -> None:
        waiter = self.windows.get(stream_id)
        if waiter is None or waiter.done():
            waiter = self.windows[stream_id] = asyncio.get_running_loop().create_future()
        await waiter

    def _wake_windows(self) -> None:
        for waiter in self.windows.values():
            if not waiter.done():
                waiter.set_result(None)
        self.windows.clear()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.conn.closed:
            self.conn.transport.write(data)
