"""WebSockets on `GET /v0/ws` (spec/api.md 7.3), for one gateway process: admitting an
upgrade and what its connections share.

An upgrade is admitted like a watch stream (gateway/watch_service.py): the socket
registers a `stream_lease` at the shard its id hashes to, renewed every heartbeat, so the
node's SSE caps (TOPICS_MAX_SSE_CONNECTIONS and its per-key variant) and the
`topics_sse_connections` gauge count WebSockets with the SSE streams; it registers first
and counts itself, so two racing upgrades can both be refused but never both admitted over
a cap. Its connection (gateway/ws_connection.py) shares the watch streams' commit listener
and shared reads, and is ended by the same stop(). A publish is the HTTP append's own path
(TopicApi.append_reply, gateway/topic_api.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from topics_actors.gateway.api_keys import ApiKey
from topics_actors.gateway.watch_request import owner_of
from topics_actors.gateway.watch_service import WatchService
from topics_actors.gateway.work_service import StreamRegistration, WorkService
from topics_actors.gateway.ws_connection import ChannelClosed, WsChannel, WsConnection
from topics_actors.gateway.ws_session import Publish, RecordTexts

STREAM_PREFIX = "ws_"

# (topic, append body, Idempotency-Key header, return_seqs, key, t0 ns) -> (status, reply)
AppendReply = Callable[[str, dict, str | None, bool, ApiKey | None, int],
                       Awaitable[tuple[int, dict]]]


class WsService:
    def __init__(self, watch: WatchService, work: WorkService, append: AppendReply):
        self.watch = watch
        self.work = work                    # the stream leases' heartbeat and spawner
        self.append = append
        self.reads = watch.reads
        self.listener = watch.listener
        self.heartbeat_s = work.heartbeat_ms / 1000
        self.frame_bytes_max = watch.settings.body_bytes_max
        self.records = RecordTexts()
        self.open_sockets = 0
        self.all_closed = asyncio.Event()
        self.all_closed.set()

    def stopping(self) -> bool:
        return self.watch.stopping

    async def topic_states(self, topics: dict, lenient: bool) -> dict:
        return await self.watch.topic_states(topics, lenient)

    async def publish(self, op: Publish, key: ApiKey | None) -> dict:
        _status, reply = await self.append(op.topic, op.body, None, op.return_seqs, key,
                                           time.perf_counter_ns())
        return reply

    async def admit(self, key: ApiKey | None) -> tuple[WsConnection, StreamRegistration]:
        """A connection for a socket of `key`, counted in the SSE caps (429 over them)."""
        lease = StreamRegistration(self.work, STREAM_PREFIX + uuid.uuid4().hex, owner_of(key))
        await lease.send(self.work.lease_ms)
        try:
            await self.watch.check_stream_caps(lease.owner)
            await self.watch.connect_feeds()
        except BaseException:
            await lease.close_now()         # registered above: it must not count
            raise
        connection = WsConnection(self, key, lambda: lease.renew(self.work.lease_ms))
        return connection, lease

    async def serve(self, connection: WsConnection, lease: StreamRegistration,
                    accept: Callable[[], Awaitable[WsChannel]]) -> None:
        """Accept the upgrade and serve the socket until it ends; the lease closes then."""
        self.watch.streams.add(connection)      # WatchService.stop() wakes it
        self.open_sockets += 1
        self.all_closed.clear()
        try:
            channel = await accept()
            try:
                await connection.run(channel)
            finally:
                channel.close()
        except ChannelClosed:
            pass                                # the client left during the handshake
        finally:
            self.watch.streams.discard(connection)
            lease.close()
            self.open_sockets -= 1
            if not self.open_sockets:
                self.all_closed.set()

    async def wait_closed(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until every socket has ended; after stop() each
        sends its `server_shutting_down` frame first, so the gateway's stop waits for this
        before it closes the connections that are left."""
        try:
            await asyncio.wait_for(self.all_closed.wait(), timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
