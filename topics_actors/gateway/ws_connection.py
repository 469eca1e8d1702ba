"""One WebSocket on `GET /v0/ws` (spec/api.md 7.3), once accepted: the thin shell around
ws_session.py's rules.

Three tasks share the socket. The reader takes the client's frames one at a time and
answers each in order (a publish is awaited before the next frame is read, so acks come in
the order of the publishes). The pusher is a watch stream's loop over the subscribed
topics (watch_stream.catch_up on the shared reads, woken by the commit feed, a re-read
after every heartbeat interval of silence). The writer is the only task that sends, so
frames never interleave and one slow socket holds one task. Everything goes through one bounded
outbox, so a client that does not read stops the pusher (its cursors wait) and then the
reader, and nothing piles up.

Subscribing and unsubscribing change what the pusher reads, so the pusher applies them
itself between pages and sends their reply: `subscribed` comes before the topic's first
record, and no record of a topic follows its `unsubscribed`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from topics_actors.errors import TopicsError
from topics_actors.gateway import ws_session as ws
from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.commit_listener import CommitListener, Wake, wait_woken
from topics_actors.protocol.commit_feed import NotePage
from topics_actors.gateway.shared_reads import SharedReads
from topics_actors.gateway.watch_stream import HEARTBEAT_READ_SHARE_S, catch_up

log = logging.getLogger(__name__)

OUTBOX_FRAMES_MAX = 256
_CLOSE = object()            # the writer's last item: close the socket


class ChannelClosed(Exception):
    """A send on a socket the client has left (the end of a connection, not a failure)."""


class WsChannel(Protocol):
    """An accepted WebSocket, as the HTTP server gives it (gateway/ws_transport.py)."""

    async def receive(self) -> tuple[str | None, bool]:
        """The next client message: (text, binary); (None, False) once the client left."""

    async def send(self, text: str) -> None:
        """Send one text frame; ChannelClosed once the client has left."""

    def ready(self) -> bool:
        """Whether a frame can be pushed now (open, not backed up)."""

    def push(self, *texts: str) -> None:
        """Send text frames now, together, without waiting (after ready())."""

    def close(self) -> None: ...


class WsHooks(Protocol):
    """What a connection needs from the gateway (gateway/ws_service.py)."""
    reads: SharedReads
    listener: CommitListener
    heartbeat_s: float
    frame_bytes_max: int            # a client frame's size limit (TOPICS_MAX_BODY_BYTES)
    records: ws.RecordTexts         # record frame texts shared by the gateway's sockets

    def stopping(self) -> bool: ...
    async def topic_states(self, topics: dict, lenient: bool) -> dict: ...
    async def publish(self, op: ws.Publish, key: ApiKey | None) -> dict: ...


class WsConnection:
    def __init__(self, hooks: WsHooks, key: ApiKey | None, renew: Callable[[], None]):
        self.hooks = hooks
        self.key = key
        self.renew = renew                  # () -> the socket's stream lease, in background
        self.subs = ws.Subscriptions()
        self.outbox: asyncio.Queue = asyncio.Queue(OUTBOX_FRAMES_MAX)
        self.wake = Wake()
        self.changes: deque = deque()       # (change, done future), applied by the pusher
        self.channel: WsChannel | None = None
        self.waiting = False                # the pusher waits between rounds
        self.sending = False                # the writer is in a send

    async def run(self, channel: WsChannel) -> None:
        """Serve the socket until the client leaves, a send fails, or the gateway stops
        (then an `error` server_shutting_down frame goes out first)."""
        self.channel = channel
        pusher = asyncio.ensure_future(self._pusher())
        tasks = [asyncio.ensure_future(self._reader(channel)), pusher,
                 asyncio.ensure_future(self._writer(channel))]
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending,
                                                   return_when=asyncio.FIRST_COMPLETED)
                # A pusher that ended well has queued the close: the writer ends the socket.
                if done != {pusher} or pusher.exception() is not None:
                    break
        finally:
            for task in tasks:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            self.channel = None
            for topic in self.subs.topics():
                self.hooks.listener.unwatch(topic, self.wake)
        for outcome in outcomes:
            if isinstance(outcome, AssertionError):
                raise outcome    # a bug: on to the process's top level (http_server)
            if isinstance(outcome, Exception) and not isinstance(outcome, ChannelClosed):
                log.error("event=ws_failed", exc_info=outcome)

    # --- the writer ---------------------------------------------------------------------------

    async def _writer(self, channel: WsChannel) -> None:
        while True:
            frame = await self.outbox.get()     # the pusher's close or the client's leaving
            if frame is _CLOSE:                 # ends the wait, never a timeout
                return
            self.sending = True
            try:
                await channel.send(frame)
            finally:
                self.sending = False

    # --- the reader ---------------------------------------------------------------------------

    async def _reader(self, channel: WsChannel) -> None:
        while True:
            text, binary = await channel.receive()   # raced with the other tasks in run()
            if text is None and not binary:
                return
            frame = await self._answer(text, binary)
            if frame is not None:
                await self.outbox.put(frame)

    async def _answer(self, text: str | None, binary: bool) -> str | None:
        request_id = None
        try:
            op = ws.parse_op(text, binary, self.hooks.frame_bytes_max)
            request_id = op.request_id
            ws.authorize(op, self.key)
            return await self._perform(op)
        except ws.OpError as error:
            return error.frame()
        except TopicsError as error:
            return ws.OpError.of(request_id, error).frame()
        except AssertionError:
            raise        # a bug (InvariantViolation): the process's top level ends it
        except Exception:
            log.exception("event=ws_op_failed")
            return ws.error_frame(request_id, "internal", "internal error")

    async def _perform(self, op) -> str | None:
        if isinstance(op, ws.Ping):
            return ws.pong(op.request_id)
        if isinstance(op, ws.Publish):
            return ws.ack(op.request_id, await self.hooks.publish(op, self.key))
        if isinstance(op, ws.Subscribe):
            self.subs.check_room(op)
            states = await self.hooks.topic_states(op.topics, op.lenient)
            await self._change(lambda: self._subscribe(op, states))
        else:
            await self._change(lambda: self._unsubscribe(op))
        return None                 # the pusher sent the reply

    async def _change(self, change: Callable[[], str]) -> None:
        done = asyncio.get_running_loop().create_future()
        self.changes.append((change, done))
        self.wake.set()
        await done

    def _subscribe(self, op: ws.Subscribe, states: dict) -> str:
        self.subs.check_room(op)            # again: another subscribe may have come between
        for name in self.subs.subscribe(states, op.options):
            self.hooks.listener.watch(name, self.wake, self.take)
        return ws.subscribed(op.request_id, states)

    def _unsubscribe(self, op: ws.Unsubscribe) -> str:
        removed = self.subs.unsubscribe(op.topics)
        for name in removed:
            self.hooks.listener.unwatch(name, self.wake)
        return ws.unsubscribed(op.request_id, removed)

    # --- the pusher ---------------------------------------------------------------------------

    async def _apply_changes(self) -> None:
        while self.changes:
            change, done = self.changes.popleft()
            try:
                frame = change()
            except ws.OpError as error:
                frame = error.frame()
            await self.outbox.put(frame)
            if not done.done():
                done.set_result(None)

    def _interrupted(self) -> bool:
        return bool(self.changes) or self.hooks.stopping()

    async def _pusher(self) -> None:
        heartbeat_s = self.hooks.heartbeat_s
        checked = renewed = time.monotonic()
        while not self.hooks.stopping():
            self.wake.clear()
            await self._apply_changes()
            await self._round()
            if time.monotonic() - renewed >= heartbeat_s:     # busy or idle alike
                renewed = time.monotonic()
                self.renew()
            if self._interrupted():
                continue
            remaining = heartbeat_s - (time.monotonic() - checked)
            if remaining > 0 and await self._wait(remaining):
                continue
            checked = time.monotonic()
            for topic in self.subs.topics():    # a lost notification is caught here
                self.hooks.reads.refresh(topic, HEARTBEAT_READ_SHARE_S)
        await self.outbox.put(ws.shutting_down_frame())
        await self.outbox.put(_CLOSE)

    async def _wait(self, timeout_s: float) -> bool:
        self.waiting = True
        try:
            return await wait_woken(self.wake, timeout_s)
        finally:
            self.waiting = False

    def take(self, topic: str, page: NotePage) -> bool:
        """A commit notification's page, sent at once while the pusher waits, nothing is
        queued or being sent, and the socket sits at exactly the page's start with
        options that read exactly it (watch_stream.WatchStream.take for SSE); else the
        pusher is woken and reads as usual."""
        subs, channel = self.subs, self.channel
        if not self.waiting or self.sending or not self.outbox.empty() or channel is None \
                or subs.cursors.cursors.get(topic) != page.from_seq \
                or topic in subs.cursors.deleted or not channel.ready():
            return False
        read = self.hooks.reads.offered(topic, page.from_seq, subs.views[topic])
        if read is None:
            return False
        records = self.hooks.records
        channel.push(*(ws.push(event, records) for event in subs.cursors.read(topic, read)))
        return True

    async def _round(self) -> None:
        subs = self.subs
        for topic in subs.reading():
            if self._interrupted():
                return
            async for events in catch_up(self.hooks.reads, subs.cursors, topic,
                                         subs.views[topic], self._interrupted):
                for event in events:
                    await self.outbox.put(ws.push(event, self.hooks.records))
            if topic in subs.cursors.deleted:      # terminal: the topic leaves the socket
                subs.unsubscribe((topic,))
                self.hooks.listener.unwatch(topic, self.wake)

