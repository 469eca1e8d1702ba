"""Many watch streams at once for tests: each watcher is one asyncio task on a raw socket
(a thousand need no thread each), holding a watch session, reading its SSE stream
(chunked framing, events), keeping the records it took, and resuming after a break: a new
GET with Last-Event-ID, or, when the session is gone with its shard (404), a new session
from the topic cursor it holds.

The records a watcher took are kept by topic as (seq, data) in arrival order, so a test
can assert order, completeness and duplicates itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

from topics_actors.watch_cursor import decode_cursor

CONNECT_TIMEOUT_S = 10.0


@dataclasses.dataclass
class Watcher:
    name: str
    topics: list[str]
    options: dict                        # the watch session's options (node, heartbeat_ms...)
    url: str = ""                        # its session's stream
    records: dict[str, list] = dataclasses.field(default_factory=dict)
    cursor_id: str | None = None         # the last event id taken
    cursors: dict[str, int] = dataclasses.field(default_factory=dict)
    resumes: int = 0
    sessions: int = 0
    streams: int = 0                     # GETs of its stream answered 200
    other_events: list = dataclasses.field(default_factory=list)   # tombstones, deletes


class Crowd:
    def __init__(self, port: int, headers: dict | None = None):
        self.port = port
        self.headers = headers or {}
        self.tasks: list[asyncio.Task] = []
        self.stopping = False

    async def _request(self, method: str, path: str, body: dict | None = None) -> tuple:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.port), CONNECT_TIMEOUT_S)
        try:
            data = json.dumps(body).encode() if body is not None else b""
            head = [f"{method} {path} HTTP/1.1", "host: t", "connection: close",
                    f"content-length: {len(data)}", "content-type: application/json",
                    *(f"{k}: {v}" for k, v in self.headers.items())]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
            raw = await asyncio.wait_for(reader.read(), CONNECT_TIMEOUT_S)
        finally:
            writer.close()
        status = int(raw.split(b" ", 2)[1])
        return status, json.loads(raw.partition(b"\r\n\r\n")[2] or b"null")

    async def session(self, watcher: Watcher) -> None:
        """A new watch session from the watcher's cursors (or the topics' tails)."""
        topics = {t: ({"from_seq": watcher.cursors[t]} if t in watcher.cursors
                      else {"tail": True}) for t in watcher.topics}
        status, body = await self._request("POST", "/v0/watch",
                                           {"topics": topics, **watcher.options})
        assert status == 200, (status, body)
        watcher.sessions += 1
        for topic, state in body["topics"].items():
            watcher.cursors.setdefault(topic, state["from_seq"])
        watcher.url, watcher.cursor_id = body["stream_url"], None

    def start(self, watcher: Watcher) -> asyncio.Task:
        """Read the watcher's stream (again: with Last-Event-ID) until stop()."""
        task = asyncio.ensure_future(self._watch(watcher))
        self.tasks.append(task)
        return task

    async def stop(self) -> None:
        self.stopping = True
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _watch(self, watcher: Watcher) -> None:
        while not self.stopping:
            status = await self._stream(watcher)
            if self.stopping:
                return
            watcher.resumes += 1
            if status == 404:                   # the session went with its shard
                await self.session(watcher)
            else:
                await asyncio.sleep(0.05)       # the server is restarting a part: again

    async def _stream(self, watcher: Watcher) -> int:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.port), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            return 0
        head = [f"GET {watcher.url} HTTP/1.1", "host: t", "accept: text/event-stream",
                *(f"{k}: {v}" for k, v in self.headers.items())]
        if watcher.cursor_id:
            head.append(f"last-event-id: {watcher.cursor_id}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            status_line = await reader.readuntil(b"\r\n\r\n")
            status = int(status_line.split(b" ", 2)[1])
            if status != 200:
                return status
            watcher.streams += 1
            await self._events(watcher, reader)
            return 200
        except (OSError, asyncio.IncompleteReadError, ValueError):
            return 0
        finally:
            writer.close()

    async def _events(self, watcher: Watcher, reader: asyncio.StreamReader) -> None:
        text = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                return
            text += (await reader.readexactly(size + 2))[:-2]
            *blocks, text = text.split(b"\n\n")
            for block in blocks:
                self._event(watcher, block.decode())

    def _event(self, watcher: Watcher, block: str) -> None:
        fields = {}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            fields[name] = value
        event = fields.get("event")
        if event is None:
            return                                # retry: or a heartbeat comment
        if "id" in fields:
            watcher.cursor_id = fields["id"]
            watcher.cursors.update(decode_cursor(fields["id"]))
        data = json.loads(fields["data"])
        if event == "record":
            taken = watcher.records.setdefault(data["topic"], [])
            taken += [(r["$seq"], r.get("data")) for r in data["records"]]
        elif event != "caught-up":
            watcher.other_events.append((event, data))
