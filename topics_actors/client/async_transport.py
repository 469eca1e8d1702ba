"""The asyncio transport of the client core (client_core.py): one AsyncConnection per
target, many requests in flight on each (at most `max_in_flight`), and the coroutine that
runs a flow's steps on the event loop (a Fan's flows at once).
"""

from __future__ import annotations

import asyncio
import itertools
import time

import zmq

from topics_actors.client.async_connection import AsyncConnection
from topics_actors.client.lane_connection import LaneConnection
from topics_actors.client.client_core import (
    Call, ClientCore, Fan, Flow, Pause, Refusal, Request, Target, Tried,
)
from topics_actors.client.shard_map import FRONT
from topics_actors.errors import TopicsError
from topics_actors.protocol import encode
from topics_actors.protocol.lane import lane_path


class AsyncTransport:
    def __init__(self, ctx: zmq.Context, core: ClientCore, request_timeout_ms: int,
                 max_in_flight: int, lanes: bool = False):
        """`lanes`: reach a shard's ipc endpoint on its lane (protocol/lane.py), the way
        of the node's own processes."""
        self._ctx = ctx
        self._lanes = lanes
        self._core = core
        self._front = core.front
        self._request_timeout_ms = request_timeout_ms
        self._max_in_flight = max_in_flight
        self._corr = itertools.count(1)
        self._conns: dict[int | str, AsyncConnection] = {}   # shards; other nodes' fronts
        self._made_for: dict[int | str, Target] = {}     # the target each was made for

    async def run(self, flow: Flow):
        """Run `flow` to its end: its result, or its error."""
        send, result = flow.send, None
        try:
            while True:
                step = send(result)
                send = flow.send
                try:
                    if type(step) is Call:
                        result = await self.call(step)
                    else:
                        result = await self._other(step)
                except TopicsError as error:
                    result, send = error, flow.throw
        except StopIteration as done:
            return done.value

    async def send(self, req: Request) -> dict:
        """A one-request operation: its request with the core's retries (the first attempt
        without a flow when the route is known), its reply shaped."""
        core = self._core
        call = core.attempt(req.topic, req.msg, req.wait_ms)
        if call is None:
            reply = await self.run(core.request(req.topic, req.msg, None, req.wait_ms))
        else:
            started_s = time.monotonic()
            try:
                reply = await self.call(call)
            except TopicsError as error:
                reply = await self.run(core.request(req.topic, req.msg, None, req.wait_ms,
                                                    Tried(started_s, None, error)))
            else:
                if reply is None:
                    reply = await self.run(core.request(req.topic, req.msg, None, req.wait_ms,
                                                        Tried(started_s, None,
                                                              sent=call.sent)))
        return reply if req.shape is None else req.shape(reply, *req.shape_args)

    async def _other(self, step):
        kind = type(step)
        if kind is Pause:
            return await asyncio.sleep(step.seconds)
        if kind is Fan:
            return list(await asyncio.gather(*map(self.run, step.flows)))
        assert kind is Refusal, f"a flow yielded {step!r}"
        return self._refusal()

    def _refusal(self) -> TopicsError | None:
        front = self._conns.get(FRONT)
        return None if front is None else front.watch.refusal(self._front.endpoint)

    def connection(self, target: Target) -> AsyncConnection | LaneConnection:
        conn = self._conns.get(target.key)
        if (conn is not None and self._made_for.get(target.key) is target
                and not getattr(conn, "closed", False)):
            return conn             # the connection made for this very target, still up
        self._made_for[target.key] = target
        lane = lane_path(target.endpoint) if self._lanes and target.key != FRONT else ""
        endpoint = lane or target.endpoint
        conn = self._conns.get(target.key)
        if conn is None or conn.endpoint != endpoint or (lane and conn.closed):
            if conn is not None:
                conn.close()
            if lane:
                conn = LaneConnection(lane, self._max_in_flight)
            else:
                conn = AsyncConnection(self._ctx, endpoint, self._max_in_flight,
                                       target.curve, watch=target.key == FRONT)
            self._conns[target.key] = conn
        return conn

    async def call(self, call: Call) -> dict | None:
        """One attempt: the reply, or None if nothing came back in time (or no connection
        came up within `connect_ms`)."""
        conn = self.connection(call.target)
        async with conn.window:
            corr = next(self._corr)
            future = conn.expect(corr, call.timeout_ms / 1000)
            try:
                raw = encode(call.msg, corr)
                if not conn.send(raw, corr):   # not connected (yet): wait, within limits
                    wait_ms = min(call.timeout_ms, call.connect_ms or call.timeout_ms)
                    if not await conn.send_when_connected(raw, corr, wait_ms):
                        return None
                call.sent = True
                return await future
            finally:
                conn.forget(corr)

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._made_for.clear()
