"""A minimal asyncio client of the Redis protocol (RESP2), enough for the streams peer of
the queue, watch and replication benches: one connection, commands sent one at a time (or
a few pipelined in one write), replies parsed into bytes, ints, lists and None. redis-py
is not a dependency of this repository, and a bench needs only a few commands."""

from __future__ import annotations

import asyncio


class RespError(Exception):
    """An error reply (`-ERR ...`)."""


def encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class RespConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> "RespConnection":
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        return cls(reader, writer)

    async def call(self, *args):
        self.writer.write(encode(args))
        return await self.read_reply()

    async def pipeline(self, commands: list) -> list:
        """Send several commands in one write, then read their replies in order; an error
        reply is raised once every reply is read (the connection stays in step)."""
        self.writer.write(b"".join(encode(args) for args in commands))
        replies, failed = [], None
        for _ in commands:
            try:
                replies.append(await self.read_reply())
            except RespError as error:
                failed = failed or error
                replies.append(None)
        if failed is not None:
            raise failed
        return replies

    async def read_reply(self):
        line = await self.reader.readuntil(b"\r\n")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RespError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            return (await self.reader.readexactly(size + 2))[:-2]
        if kind == b"*":
            size = int(rest)
            if size < 0:
                return None
            return [await self.read_reply() for _ in range(size)]
        raise RespError(f"unexpected reply line {line[:60]!r}")

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def call_once(port: int, *args):
    """One command on a connection of its own (set-up and clean-up of a bench)."""
    conn = await RespConnection.open(port)
    try:
        return await conn.call(*args)
    finally:
        await conn.close()
