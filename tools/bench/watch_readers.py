"""Watcher processes of the watch latency bench: each runs many watchers on asyncio, all
on one side, and sends back how many records each got and every record's latency.

A record's data carries `s`, the appender's time.monotonic_ns() when it sent the append
(CLOCK_MONOTONIC is one clock for every process of the machine), so latency = arrival -
send, the same measure for both sides. topics: a watch session per watcher (POST /v0/watch,
`tail`), its SSE stream read line by line; ready once the stream said `caught-up`. Redis:
one connection per watcher looping `XREAD BLOCK 0 STREAMS <stream> <last id>`; ready once
the command is sent (the parent then waits for Redis's own count of blocked clients).
"""

from __future__ import annotations

import asyncio
import time
from array import array

import orjson

from resp_client import RespConnection


class Tally:
    def __init__(self):
        self.records = 0
        self.latencies_ns = array("q")

    def take(self, sent_ns: int) -> None:
        self.records += 1
        self.latencies_ns.append(time.monotonic_ns() - sent_ns)


async def http_json(port: int, method: str, path: str, body: dict | None = None) -> dict:
    """One request on its own connection; the answer's JSON body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = orjson.dumps(body) if body is not None else b""
    writer.write((f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n").encode() + raw)
    data = await reader.read()
    writer.close()
    return orjson.loads(data.split(b"\r\n\r\n", 1)[1])


async def read_watch_stream(port: int, url: str, on_data, ready: asyncio.Event) -> None:
    """GET a watch stream and hand each frame's data line (JSON after `data: `) to
    on_data; `ready` is set at the first `caught-up`. Returns when the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    writer.write(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b'data: {"topic"'):
                on_data(line[6:])
            elif line.startswith(b"event: caught-up"):
                ready.set()
    finally:
        writer.close()


async def sse_watcher(port: int, topic: str, tally: Tally, ready: asyncio.Event) -> None:
    session = await http_json(port, "POST", "/v0/watch",
                              {"topics": {topic: {"tail": True}}, "heartbeat_ms": 60000})

    def take(raw: bytes) -> None:
        for record in orjson.loads(raw).get("records", ()):
            tally.take(record["data"]["s"])
    await read_watch_stream(port, session["stream_url"], take, ready)


async def redis_watcher(port: int, stream: str, tally: Tally, ready: asyncio.Event) -> None:
    conn = await RespConnection.open(port)
    last = b"0-0"
    try:
        while True:
            conn.writer.write(b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n"
                              b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(stream), stream.encode(),
                                                               len(last), last))
            ready.set()
            reply = await conn.read_reply()
            for entry_id, fields in reply[0][1]:
                last = entry_id
                tally.take(int(fields[1]))
    finally:
        await conn.close()


async def _publish(tallies: list[Tally], taken) -> None:
    """Keeps `taken` (a shared counter the parent polls) at the records taken so far."""
    while True:
        taken.value = sum(t.records for t in tallies)
        await asyncio.sleep(0.05)


async def _watch(side: str, port: int, topic: str, count: int, ready_q, taken, stop) -> list:
    tallies = [Tally() for _ in range(count)]
    readies = [asyncio.Event() for _ in range(count)]
    run = sse_watcher if side == "topics" else redis_watcher
    tasks = [asyncio.ensure_future(_publish(tallies, taken))]
    for tally, ready in zip(tallies, readies):
        tasks.append(asyncio.ensure_future(run(port, topic, tally, ready)))
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    ready_q.put(count)
    await asyncio.get_running_loop().run_in_executor(None, stop.wait)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return [(t.records, t.latencies_ns.tobytes()) for t in tallies]


def reader_main(side: str, port: int, topic: str, count: int, ready_q, taken, stop,
                results) -> None:
    """A watcher process: `count` watchers of one side, until `stop` is set."""
    results.put(asyncio.run(_watch(side, port, topic, count, ready_q, taken, stop)))
