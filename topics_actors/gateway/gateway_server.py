"""One gateway process: the event loop, the HTTP server on the inherited socket, the link
to the supervisor (hello, heartbeats, dying with it) and an orderly stop.

On SIGTERM the gateway stops accepting connections, answers its parked long polls at once
(the page of a wait that ended now) and ends its watch streams, lets the other requests in
flight finish (for at most DRAIN_MS; a claim may wait up to CLAIM_WAIT_MS_MAX) and exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

try:            # imported with the module, so that a child forked from the fork server
    import uvloop   # shares the fork server's copy (imported in the child: 3.3 MB its own)
except ImportError:
    uvloop = None

from topics_actors import server_keys
from topics_actors.config import GatewayOptions, ProcessState
from topics_actors.gateway.engine_link import EngineLink
from topics_actors.gateway.gateway_core import GatewayCore
from topics_actors.gateway.gateway_settings import GatewaySettings
from topics_actors.gateway.head_reads import HeadReads
from topics_actors.gateway.http_server import HttpServer
from topics_actors.gateway.request_stats import RequestStats
from topics_actors.supervisor_link import SupervisorLink

log = logging.getLogger(__name__)

DRAIN_MS = 5_000
DRAIN_POLL_S = 0.02
WS_CLOSE_WAIT_S = 1.0


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (a dependency on Linux), else asyncio's: the
    HTTP server's transports and the engine link's socket callbacks cost less on it."""
    return asyncio.new_event_loop() if uvloop is None else uvloop.new_event_loop()


class GatewayServer:
    def __init__(self, settings: GatewaySettings, options: GatewayOptions,
                 link: SupervisorLink | None):
        self.settings = settings
        self.options = options
        self.index = options.process.index
        self.link = link
        self.heartbeat_s = options.process.heartbeat_interval_ms / 1000

    def serve(self) -> None:
        loop = new_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(loop))
        finally:
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        options = self.options
        engine = EngineLink(options.front, node_keys=server_keys.load(options.node_key_dir)
                            if options.node_key_dir else None)
        requests = RequestStats(options.requests_file, self.index)
        core = GatewayCore(self.settings, engine, options.node_started_ms,
                           zmq_port=options.zmq_port, requests=requests,
                           heads=HeadReads(engine.ipc_of))
        server = HttpServer(core, self.settings.body_bytes_max)
        await server.start(options.listen_fd)
        log.info("event=serving gateway=%d pid=%d", self.index, os.getpid())
        beats = loop.create_task(self._beat(stop))
        await stop.wait()
        server.stop_accepting()
        core.stop()         # watch streams end, parked long polls are answered now
        self._send_beat(ProcessState.STOPPING)
        if core.ws.open_sockets:     # every WebSocket sends its last frame and closes
            await core.ws.wait_closed(WS_CLOSE_WAIT_S)
        deadline = time.monotonic() + DRAIN_MS / 1000
        while server.in_flight and time.monotonic() < deadline:
            server.close_idle()
            await asyncio.sleep(DRAIN_POLL_S)
        server.close()
        beats.cancel()
        await core.watch.close()
        await engine.close()
        requests.close()
        log.info("event=stopped gateway=%d unfinished=%d", self.index, server.in_flight)

    def _send_beat(self, state: ProcessState | None = None) -> bool:
        if self.link is None:
            return True
        return self.link.keep_alive(state, force=state is not None)

    async def _beat(self, stop: asyncio.Event) -> None:
        self._send_beat(ProcessState.READY)
        while not stop.is_set():
            await asyncio.sleep(min(self.heartbeat_s, 0.5))
            if not self._send_beat():
                log.warning("event=parent_gone gateway=%d", self.index)
                stop.set()
