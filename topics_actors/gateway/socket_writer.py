"""Event streams' chunks written to their sockets by a thread of their own.

Why: at 1000 watchers, about half of the gateway's time went into the `send` of each
stream's chunk (one system call per watcher per record page), all on the event loop's
thread, while the machine's other core had room. A `send` releases the GIL, so a thread
that makes them runs beside the loop: the loop renders and routes, the thread writes.

How the order of a stream's bytes is kept: an Outlet (one per HTTP/1.1 stream) sends a
chunk by exactly one of three ways, and a chunk never overtakes an earlier one:
- to the thread, when nothing of the outlet waits anywhere: the chunk joins the batch
  being built, handed to the thread at the end of the loop turn or once it holds
  HANDOFF_CHUNKS chunks (chunks of one outlet in one batch are written in order);
- to `held`, while a batch with the outlet's chunks is with the thread;
- to the asyncio transport, while the transport buffers earlier bytes (what the thread
  could not write when the socket was full, handed back to the loop): its flow control,
  pause_writing and all, then works as before.

The thread writes to a duplicate of the socket's descriptor, so a connection closed by the
loop meanwhile can never hand its number to another socket under the thread; the outlet
closes its duplicate once nothing of it is with the thread. The queue to the thread is
bounded: when it is full the loop writes the batch itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading

log = logging.getLogger(__name__)

BATCHES_MAX = 64                 # batches waiting for the thread before the loop writes
HANDOFF_CHUNKS = 32              # a batch this long goes at once: the thread starts sending
                                 # while the loop still renders for the other streams
HELD_BYTES_MAX = 256 * 1024      # an outlet's bytes waiting for the thread: a backed-up stream


class Outlet:
    """One stream's way to its socket (create with SocketWriter.outlet, on the loop)."""
    __slots__ = ("writer", "fd", "transport", "batch", "held", "held_bytes", "closing",
                 "_back")

    def __init__(self, writer: SocketWriter, fd: int, transport: asyncio.Transport):
        self.writer, self.fd, self.transport = writer, fd, transport
        self.batch: list | None = None    # the batch holding this outlet's chunks, if any
        self.held: list[bytes] = []
        self.held_bytes = 0
        self.closing = False
        self._back: asyncio.Future | None = None   # done when the thread hands it back

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        writer = self.writer
        if self.batch is None:
            if self.transport.get_write_buffer_size():
                self.transport.write(data)        # earlier bytes wait there: keep behind them
            else:
                writer.submit(self, data)
        elif self.batch is writer.building:
            writer.building.append((self, data))
        else:
            self.held.append(data)
            self.held_bytes += len(data)

    def backed_up(self) -> bool:
        return self.held_bytes > HELD_BYTES_MAX

    def idle(self) -> bool:
        """Nothing of the outlet is with the thread or held for it."""
        return self.batch is None and not self.held

    async def unclogged(self) -> None:
        """Wait until the bytes held for the thread are under the limit again."""
        while self.backed_up() and not self.closing:
            await self._handed_back()

    async def settled(self) -> None:
        """Wait until nothing of the outlet is with the thread (or it closed)."""
        while not self.idle() and not self.closing:
            await self._handed_back()

    def _handed_back(self) -> asyncio.Future:
        if self._back is None:
            self._back = asyncio.get_running_loop().create_future()
        return self._back

    def _wake(self) -> None:
        if self._back is not None and not self._back.done():
            self._back.set_result(None)
        self._back = None

    def close(self) -> None:
        """The stream ended or its connection went: the duplicate closes once the thread
        has nothing of the outlet."""
        self.closing = True
        self.held, self.held_bytes = [], 0
        if self.batch is None:
            self._release()
        self._wake()

    def _release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _returned(self, rest: list[bytes]) -> None:
        """The batch with this outlet's chunks came back; `rest`: what the socket did not
        take. It and what was held go to the transport, in order."""
        self.batch = None
        if self.closing:
            self._release()
            return
        out = rest + self.held
        self.held, self.held_bytes = [], 0
        if out and not self.transport.is_closing():
            self.transport.write(b"".join(out))
        self._wake()


class SocketWriter:
    """The thread, and the loop's side of handing it batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.building: list = []
        self.batches: queue.Queue = queue.Queue(BATCHES_MAX)
        self.thread = threading.Thread(target=self._run, name="socket-writer", daemon=True)
        self.thread.start()

    def outlet(self, sock, transport: asyncio.Transport) -> Outlet:
        return Outlet(self, os.dup(sock.fileno()), transport)

    def submit(self, outlet: Outlet, data: bytes) -> None:
        building = self.building
        if not building:
            self.loop.call_soon(self._hand_off)
        outlet.batch = building
        building.append((outlet, data))
        if len(building) >= HANDOFF_CHUNKS:
            self._hand_off()

    def _hand_off(self) -> None:
        batch, self.building = self.building, []
        if not batch:
            return
        try:
            self.batches.put_nowait(batch)
        except queue.Full:
            self._returned(batch, write_batch(batch))

    def _run(self) -> None:
        while True:
            batch = self.batches.get()
            if batch is None:
                return
            rest = write_batch(batch)
            try:
                self.loop.call_soon_threadsafe(self._returned, batch, rest)
            except RuntimeError:           # the loop closed: the gateway is stopping
                return

    def _returned(self, batch: list, rest: dict) -> None:
        done: set = set()
        for outlet, _ in batch:
            if outlet not in done:
                done.add(outlet)
                outlet._returned(rest.get(outlet, []))

    def close(self) -> None:
        self.batches.put(None)


def write_batch(batch: list) -> dict:
    """Write each chunk to its outlet's socket, in order (on the thread). Returns, per outlet
    whose socket was full, the bytes not written (a later chunk of it is not tried)."""
    rest: dict = {}
    for outlet, data in batch:
        left = rest.get(outlet)
        if left is not None:
            left.append(data)
            continue
        try:
            sent = os.write(outlet.fd, data)
        except BlockingIOError:
            sent = 0
        except OSError:                  # the peer left: the loop's reading side sees it
            sent = len(data)
        if sent < len(data):
            rest[outlet] = [data[sent:]]
    return rest
