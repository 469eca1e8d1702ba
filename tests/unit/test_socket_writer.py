"""The gateway's socket writer (gateway/socket_writer.py).

Goal: a stream's bytes reach its socket whole and in order whichever way each chunk takes
(the thread, held while a batch is out, the transport once the socket was full), and an
outlet's duplicate descriptor is closed exactly when nothing of it is with the thread.
Method: a real asyncio transport over a socketpair whose reader is slow (small buffers,
many chunks, so the socket fills and bytes come back to the loop), the bytes read
compared with what was written.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest

from topics_actors.gateway.socket_writer import SocketWriter

pytestmark = pytest.mark.timeout(60)


def _reader(sock: socket.socket, total: int, out: bytearray, done: threading.Event) -> None:
    sock.settimeout(20)
    while len(out) < total:
        data = sock.recv(1024)        # slow on purpose: small reads fill the sender's buffer
        if not data:
            break
        out += data
    done.set()


async def _connect(sock: socket.socket):
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=sock)
    transport.set_write_buffer_limits(high=256 * 1024)
    return transport


def test_chunks_arrive_whole_and_in_order_when_the_socket_fills():
    async def main():
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunks = [(b"%06d:" % i) + bytes([65 + i % 26]) * (i % 700) for i in range(3000)]
        total = sum(map(len, chunks))
        got, done = bytearray(), threading.Event()
        threading.Thread(target=_reader, args=(b, total, got, done), daemon=True).start()
        transport = await _connect(a)
        writer = SocketWriter(asyncio.get_running_loop())
        outlet = writer.outlet(a, transport)
        for i, chunk in enumerate(chunks):
            outlet.write(chunk)
            if i % 50 == 0:                 # batches go out and come back meanwhile
                await asyncio.sleep(0.001 if i % 200 == 0 else 0)
        await outlet.settled()
        assert outlet.idle()
        assert await asyncio.to_thread(done.wait, 20)
        outlet.close()
        writer.close()
        transport.close()
        b.close()
        return bytes(got), b"".join(chunks), outlet.fd
    got, want, fd = asyncio.run(main())
    assert got == want
    assert fd == -1


def test_a_closed_outlet_writes_nothing_more_and_frees_its_descriptor():
    async def main():
        a, b = socket.socketpair()
        transport = await _connect(a)
        writer = SocketWriter(asyncio.get_running_loop())
        outlet = writer.outlet(a, transport)
        dup = outlet.fd
        outlet.write(b"first")
        await asyncio.sleep(0)               # the batch goes to the thread
        outlet.close()                       # while it may still be out
        outlet.write(b"never")
        while outlet.fd != -1:
            await asyncio.sleep(0.001)
        with pytest.raises(OSError):
            os.fstat(dup)                    # the duplicate is closed
        transport.close()
        await asyncio.sleep(0.01)
        b.settimeout(5)
        data = b""
        while True:
            more = b.recv(100)
            if not more:
                break
            data += more
        writer.close()
        b.close()
        return data
    assert asyncio.run(main()) == b"first"
